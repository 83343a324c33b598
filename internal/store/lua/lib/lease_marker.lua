-- fragment lease_marker; needs: nothing
-- lease_marker is the marker member of a group's lease set (see scripts.go) written by the
-- claims of the group's registration epoch: "~lease-set-marker~", the epoch, and tildes to 80
-- bytes. Every claim writes it, so the lease set holds it while it holds leases of that epoch;
-- an ack, nack, extend or release looks it up with the leases it names (see held) and is
-- refused when it is absent: the group was removed or registered anew since (or Redis lost its
-- data), and what the caller names is not a lease of the current registration.
local function lease_marker(epoch)
  return '~lease-set-marker~' .. epoch .. string.rep('~', math.max(62 - #epoch, 0))
end
