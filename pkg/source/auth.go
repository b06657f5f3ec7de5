package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Auth says how to authenticate to a Git server. Secrets are read from
// files on every fetch, so rotating them needs no restart; they are never
// logged.
type Auth struct {
	Username                 string
	PasswordFile             string // HTTP(S) password or token
	SSHKeyFile               string
	SSHKeyPassphraseFile     string
	KnownHostsFile           string
	InsecureSkipHostKeyCheck bool
	CAFile                   string // extra CA certificates for HTTPS (PEM)
}

// isSSH reports whether a URL is ssh:// or scp-style user@host:path.
func isSSH(u string) bool {
	if strings.HasPrefix(u, "ssh://") {
		return true
	}
	return !strings.Contains(u, "://") && strings.Contains(u, ":") && strings.Contains(strings.SplitN(u, ":", 2)[0], "@")
}

func readSecret(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read secret file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// method builds go-git's auth for the URL.
func (a Auth) method(rawURL string, log *slog.Logger) (transport.AuthMethod, error) {
	if isSSH(rawURL) {
		user := "git"
		if u, err := url.Parse(rawURL); err == nil && strings.HasPrefix(rawURL, "ssh://") && u.User != nil {
			user = u.User.Username()
		} else if at := strings.Index(rawURL, "@"); at > 0 && !strings.HasPrefix(rawURL, "ssh://") {
			user = rawURL[:at]
		}
		if a.SSHKeyFile == "" {
			return nil, errors.New("an SSH URL needs --ssh-key-file")
		}
		pass := ""
		if a.SSHKeyPassphraseFile != "" {
			var err error
			if pass, err = readSecret(a.SSHKeyPassphraseFile); err != nil {
				return nil, err
			}
		}
		keys, err := gitssh.NewPublicKeysFromFile(user, a.SSHKeyFile, pass)
		if err != nil {
			return nil, fmt.Errorf("SSH key %s: %w", a.SSHKeyFile, err)
		}
		switch {
		case a.InsecureSkipHostKeyCheck:
			log.Warn("SSH host key checking is off (--insecure-skip-host-key-check): the server is not authenticated", "url", rawURL)
			keys.HostKeyCallback = ssh.InsecureIgnoreHostKey()
		case a.KnownHostsFile != "":
			cb, err := knownhosts.New(a.KnownHostsFile)
			if err != nil {
				return nil, fmt.Errorf("known_hosts %s: %w", a.KnownHostsFile, err)
			}
			keys.HostKeyCallback = cb
		default:
			cb, err := gitssh.NewKnownHostsCallback()
			if err != nil {
				return nil, fmt.Errorf("known_hosts: %w (pass --known-hosts-file)", err)
			}
			keys.HostKeyCallback = cb
		}
		return keys, nil
	}
	if a.Username == "" && a.PasswordFile == "" {
		return nil, nil
	}
	user := a.Username
	if user == "" {
		user = "git" // a token needs some user name; servers ignore it
	}
	pass := ""
	if a.PasswordFile != "" {
		var err error
		if pass, err = readSecret(a.PasswordFile); err != nil {
			return nil, err
		}
	}
	return &githttp.BasicAuth{Username: user, Password: pass}, nil
}

func (a Auth) caBundle() ([]byte, error) {
	if a.CAFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(a.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	return b, nil
}

// explain turns transport errors into what a user can act on.
func explain(err error, timeout time.Duration) error {
	var ke *knownhosts.KeyError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer within %s (raise --fetch-timeout if the server is slow)", timeout)
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return errors.New("authentication required: pass --username and --password-file (HTTPS) or --ssh-key-file (SSH)")
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return errors.New("authentication failed: the server refused these credentials")
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return errors.New("repository not found")
	case errors.As(err, &ke) && len(ke.Want) == 0:
		return errors.New("the server's SSH host key is not in the known_hosts file; add it (ssh-keyscan) to --known-hosts-file")
	case errors.As(err, &ke):
		return errors.New("the server's SSH host key does not match the known_hosts file: it changed, or someone is in the middle; refusing")
	case strings.Contains(err.Error(), "ssh: unable to authenticate"):
		// x/crypto/ssh's client gives no type or sentinel for a refused
		// key (only this message, stable since 2012): the one error of a
		// library matched by text, at the boundary where it enters.
		return fmt.Errorf("SSH authentication failed: the server refused the key (%v)", err)
	}
	return err
}
