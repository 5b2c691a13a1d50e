package manager

import (
	"fmt"
	"slices"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/controllers/nodeipam"
)

// ownSection is the --help section of Outrigger's own flags: the names
// upstream's cloud-controller-manager does not have, which a provider's
// main is free to use for flags of its own (Linode's and GCP's
// --node-cidr-mask-size-ipv4, say).
const ownSection = "outrigger"

// ownFlagUsers are the Outrigger-only flags that only one controller
// reads: a binary that does not offer that controller has no use for the
// flag, so a provider's flag of that name and another meaning is no
// conflict. Every other Outrigger-only flag is read whatever runs.
var ownFlagUsers = map[string]string{
	"node-cidr-mask-size-ipv4": nodeipam.Name,
	"node-cidr-mask-size-ipv6": nodeipam.Name,
	"gateway-namespace":        gateway.Name,
	"gateway-namespace-mode":   gateway.Name,
	"gateway-data-plane-image": gateway.Name,
}

// OwnFlag reports whether name is one of Outrigger's own flags, which a
// provider's flag of the same name replaces on a yielding command
// (CommandText.Yield).
func OwnFlag(name string) bool {
	return ownFlags().Lookup(name) != nil
}

var ownFlags = sync.OnceValue(func() *pflag.FlagSet {
	nfs := NewOptions().flagSets()
	return nfs.FlagSet(ownSection)
})

// registerYielding puts Outrigger's own flags where a flag of the same
// name that the caller adds to cmd.Flags(), before Execute or after the
// command is built, takes their place instead of making pflag panic
// ("flag redefined"): among the persistent flags, which cobra merges into
// cmd.Flags() at parse time, skipping names already there.
func (o *Options) registerYielding(cmd *cobra.Command, nfs cliflag.NamedFlagSets) {
	for _, name := range flagSections {
		if name == ownSection {
			cmd.PersistentFlags().AddFlagSet(nfs.FlagSet(name))
			o.own = nfs.FlagSet(name)
			continue
		}
		cmd.Flags().AddFlagSet(nfs.FlagSet(name))
	}
	o.flags = cmd.Flags()
}

// TakeYielded reads, once the command's flags are parsed, the value of
// each of Outrigger's own flags that a provider's flag replaced: a value
// Outrigger's flag accepts too (an int32 where Outrigger has an int) is
// one flag with one meaning, and Outrigger reads it. A value it does not
// accept is a flag of another meaning: Outrigger keeps its default when
// nothing it runs reads the flag, and otherwise the command stops with a
// line naming both owners.
func (o *Options) TakeYielded() error {
	if o.own == nil {
		return nil
	}
	var errs []error
	o.own.VisitAll(func(ours *pflag.Flag) {
		theirs := o.flags.Lookup(ours.Name)
		if theirs == nil || theirs == ours {
			return
		}
		err := setFrom(ours.Value, theirs.Value)
		if err == nil {
			return
		}
		if user, ok := ownFlagUsers[ours.Name]; ok && !slices.Contains(o.builtin(), user) {
			return
		}
		errs = append(errs, fmt.Errorf("flag --%s is defined twice: by Outrigger (%s, %q) and by the provider's main (%s, %q), and Outrigger needs its own; rename the provider's flag",
			ours.Name, ours.Value.Type(), ours.Usage, theirs.Value.Type(), theirs.Usage))
	})
	return oneLine(errs)
}

// setFrom sets dst to src's value, element by element for lists.
func setFrom(dst, src pflag.Value) error {
	if dst.String() == src.String() {
		return nil
	}
	if ds, ok := dst.(pflag.SliceValue); ok {
		if ss, ok := src.(pflag.SliceValue); ok {
			return ds.Replace(ss.GetSlice())
		}
	}
	return dst.Set(src.String())
}

// shown reports whether f is the flag cmd parses by its name: one a
// provider's flag replaced is left out of --help's Outrigger section. Before
// parsing (help asked for by a main itself), Outrigger's are not merged
// yet, and are what parsing would find where nothing replaced them.
func shown(cmd *cobra.Command, f *pflag.Flag) bool {
	cur := cmd.Flags().Lookup(f.Name)
	return cur == nil || cur == f
}

// helpSections are nfs as --help prints them: without Outrigger's own
// flags that a provider's replaced, which the provider's section shows.
func helpSections(cmd *cobra.Command, nfs cliflag.NamedFlagSets) cliflag.NamedFlagSets {
	var out cliflag.NamedFlagSets
	for _, name := range nfs.Order {
		fs := out.FlagSet(name)
		nfs.FlagSet(name).VisitAll(func(f *pflag.Flag) {
			if shown(cmd, f) {
				fs.AddFlag(f)
			}
		})
	}
	return out
}
