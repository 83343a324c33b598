package wake

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// holdingProxy forwards TCP connections to a Redis; while held, what Redis sends back waits.
type holdingProxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	held     bool
	released *sync.Cond
	conns    []net.Conn
}

func newHoldingProxy(t *testing.T, upstream string) *holdingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &holdingProxy{ln: ln, upstream: upstream}
	p.released = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holdingProxy) addr() string { return p.ln.Addr().String() }

func (p *holdingProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

func (p *holdingProxy) release() {
	p.mu.Lock()
	p.held = false
	p.released.Broadcast()
	p.mu.Unlock()
}

func (p *holdingProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go func() {
			_, _ = io.Copy(server, client)
			_ = server.Close()
		}()
		go p.pipeBack(server, client)
	}
}

// pipeBack copies what Redis sends to the client, waiting while the proxy is held.
func (p *holdingProxy) pipeBack(server, client net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held {
				p.released.Wait()
			}
			p.mu.Unlock()
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holdingProxy) close() {
	_ = p.ln.Close()
	p.release()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
