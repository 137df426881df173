package config

// SetByFlag sets key to value as a command-line flag of its own does
// (trajflow serve's --addr for serve.addr), after Read: the value is taken
// as it is, not as YAML (an IPv6 address in brackets needs no quoting),
// and every error about the key names the flag as the user typed it
// ("--addr [::1]:8700: serve.addr: ..."), not a --set the user never
// wrote. Keys other than those listed here are refused, naming the key.
func (c *Config) SetByFlag(key, value, flag string) error {
	switch key {
	case "serve.addr":
		c.Serve.Addr = value
	default:
		return invalid(&unknownFlagKey{key})
	}
	if c.where == nil {
		c.where = map[string]string{}
	}
	c.where[key] = flag + " " + value
	return nil
}

// unknownFlagKey is a key SetByFlag does not set.
type unknownFlagKey struct{ key string }

func (e *unknownFlagKey) Error() string { return e.key + ": not settable by a flag of its own" }
