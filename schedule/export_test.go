package schedule

// PrearmedTickDelayForTest is how long after a prearmed schedule's tick its tick message falls
// due (see prearmedTickDelay).
const PrearmedTickDelayForTest = prearmedTickDelay
