package driver

// HoldOps sets how many changes of a tree a plan holds as ops before a
// sync plans the tree again as it writes it; it returns the undo.
func HoldOps(n int) func() {
	was := maxHeldOps
	maxHeldOps = n
	return func() { maxHeldOps = was }
}
