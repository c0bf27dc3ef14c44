package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/belayhq/belay/internal/app/daemon"
	"github.com/belayhq/belay/store/pgstore"
)

// storeFlagHelp documents --store wherever it is accepted.
const storeFlagHelp = "store: file: (the embedded store in the data directory, default) or postgres://USER@HOST/DB (default $BELAY_STORE, then [store] url in config.toml)"

// resolveStore picks the store setting: the flag, then $BELAY_STORE, then
// the data directory's config.toml ([store] url), then the file store.
func resolveStore(stdio Stdio, flag string, g *globalOptions) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if env := stdio.Getenv("BELAY_STORE"); env != "" {
		return env, nil
	}
	dir, err := g.dataDir(stdio)
	if err != nil {
		return "", err
	}
	cfg, err := daemon.LoadConfig(dir)
	if err != nil {
		return "", err
	}
	if cfg.Store.URL != "" {
		return cfg.Store.URL, nil
	}
	return daemon.FileStore, nil
}

type migrateOptions struct {
	globalOptions
	Store  string
	Status bool
}

func newMigrateCmd(stdio Stdio) *cobra.Command {
	var opts migrateOptions
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Bring a PostgreSQL store's schema up to date (or show it with --status)",
		Long: `Applies the schema migrations built into this belay to the PostgreSQL
database the store setting names, each in its own transaction, under an
advisory lock: nodes starting at once apply each migration once. belay
serve also applies them at start unless [store] migrate = false.

--status shows the applied and pending migrations and changes nothing.
The embedded file store needs no migrations.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMigrate(cmd.Context(), stdio, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.Data, "data", "", dataFlagHelp)
	f.StringVar(&opts.Store, "store", "", storeFlagHelp)
	f.BoolVar(&opts.Status, "status", false, "show the schema's migrations; change nothing")
	f.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func runMigrate(ctx context.Context, stdio Stdio, opts migrateOptions) error {
	url, err := resolveStore(stdio, opts.Store, &opts.globalOptions)
	if err != nil {
		return err
	}
	kind, err := daemon.StoreKind(url)
	if err != nil {
		return usagef("belay migrate --store postgres://USER@HOST/DB", "%v", err)
	}
	if kind != "postgres" {
		return usagef("belay migrate --store postgres://USER@HOST/DB", "the file store needs no migrations; name a PostgreSQL store with --store or $BELAY_STORE")
	}
	if !opts.Status {
		applied, err := pgstore.Migrate(ctx, url)
		if err != nil {
			return migrateErr(err)
		}
		for _, m := range applied {
			fmt.Fprintf(stdio.Err, "applied %04d_%s\n", m.Version, m.Name)
		}
		if len(applied) == 0 {
			fmt.Fprintln(stdio.Err, "schema is up to date")
		}
	}
	st, err := pgstore.Status(ctx, url)
	if err != nil {
		return migrateErr(err)
	}
	if opts.JSON {
		return writeJSON(stdio.Out, st)
	}
	fmt.Fprintf(stdio.Out, "store %s: schema version %d of %d\n", pgstore.Redact(url), st.Current, st.Latest)
	for _, a := range st.Applied {
		fmt.Fprintf(stdio.Out, "  applied  %04d_%s  %s\n", a.Version, a.Name, a.AppliedAt.Format("2006-01-02T15:04:05Z"))
	}
	for _, m := range st.Pending {
		fmt.Fprintf(stdio.Out, "  pending  %04d_%s\n", m.Version, m.Name)
	}
	for _, v := range st.Unknown {
		fmt.Fprintf(stdio.Out, "  unknown  %04d (applied by a newer belay)\n", v)
	}
	if len(st.Pending) > 0 {
		fmt.Fprintln(stdio.Err, "Try: belay migrate")
	}
	return nil
}

func migrateErr(err error) error {
	if errors.Is(err, pgstore.ErrUnreachable) {
		return &exitError{code: ExitUnreachable, err: err}
	}
	return err
}
