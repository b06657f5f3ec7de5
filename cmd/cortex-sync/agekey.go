package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

// sopsAgeKeyFileEnv is the variable sops itself reads the age key file
// from; honoured when --age-key-file is not given.
const sopsAgeKeyFileEnv = "SOPS_AGE_KEY_FILE"

// addAgeKeyFlag adds --age-key-file to a command that plans or applies.
func addAgeKeyFlag(cmd *cobra.Command) {
	cmd.Flags().String("age-key-file", "", "age identity file (age-keygen) to decrypt SOPS files with (decrypt: sops; default $"+sopsAgeKeyFileEnv+")")
}

// ageKeyFrom sets the age key file from cmd's flag or, not given, from
// SOPS_AGE_KEY_FILE; a file named by the variable is the agent's own too.
func (g *globals) ageKeyFrom(cmd *cobra.Command, own []reconcile.Own) []reconcile.Own {
	f := cmd.Flags().Lookup("age-key-file")
	if f == nil {
		return own
	}
	g.ageKeyFile = f.Value.String()
	if g.ageKeyFile == "" {
		if g.ageKeyFile = os.Getenv(sopsAgeKeyFileEnv); g.ageKeyFile != "" {
			own = append(own, reconcile.Own{Path: g.ageKeyFile, What: "the file of $" + sopsAgeKeyFileEnv})
		}
	}
	return own
}
