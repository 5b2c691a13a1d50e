package manager

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// autoSized are the flags whose upstream default Outrigger replaces with its
// own sizing while the flag is not given.
var autoSized = map[string]string{
	"concurrent-node-syncs":           fmt.Sprint(autoNodeWorkers),
	"concurrent-node-lifecycle-syncs": fmt.Sprint(autoNodeWorkers),
	"concurrent-service-syncs":        fmt.Sprint(autoServiceWorkers),
	"kube-api-qps":                    "no client-side limit",
	"kube-api-burst":                  "no client-side limit",
	"kube-api-content-type":           "JSON",
}

// FlagsReference renders every flag, by --help section, as the Markdown
// tables of docs/flags.md's reference part: name, type, default, whether it
// does something, and its help.
func FlagsReference() string {
	var b strings.Builder
	nfs := NewOptions().flagSets()
	for _, section := range flagSections {
		fs := nfs.FlagSet(section)
		if !fs.HasFlags() {
			continue
		}
		fmt.Fprintf(&b, "### %s\n\n| flag | type | default | status | |\n| --- | --- | --- | --- | --- |\n", section)
		fs.VisitAll(func(f *pflag.Flag) {
			status := "implemented"
			switch reason, ignored := IgnoredFlags[f.Name]; {
			case ignored:
				status = "accepted, no effect: " + reason
			case section == "outrigger":
				status = "Outrigger's own"
			case autoSized[f.Name] != "":
				status = "implemented; not given, Outrigger uses " + autoSized[f.Name]
			}
			usage := f.Usage
			if f.Name == "feature-gates" {
				usage = "Feature gates, the upstream CCM's set (`outrigger --help` lists them); see above for those that change what Outrigger does."
			}
			def := f.DefValue
			if f.Name == "feature-gates" {
				def = ""
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s | %s |\n", f.Name, f.Value.Type(), code(def), status, escape(usage))
		})
		b.WriteString("\n")
	}
	return b.String()
}

func code(s string) string {
	if s == "" || s == "[]" {
		return ""
	}
	return "`" + s + "`"
}

func escape(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}
