package hostfs

// RemoveTemps is a stand-in until the statefs branch lands.
func (d *Dir) RemoveTemps(name string) (int, error) { return 0, nil }
