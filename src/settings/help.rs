//! The settings table rendered for people: `--help` (every setting with its flag and
//! default, by section) and docs/settings.md (the same, as Markdown).

use super::specs::{flag_of, Section, Spec};

/// The `--help` text: every setting with its flag and default, grouped by section.
pub fn help_text() -> String {
    let mut out = String::from(
        "a2a-worker-controller: create, list and stop A2A workers (docker, k8s, local)\n\
         Callers use A2A at /a2a (JSON-RPC) and /a2a/rest (HTTP+JSON), or MCP at /mcp.\n\n\
         Usage: a2a-worker-controller [flags]            run the controller\n\
         \x20      a2a-worker-controller COMMAND [flags]    a client command (see the end)\n\n\
         Every setting is an environment variable and a flag: -name=v, --name v or --name=v.\n\
         Flags win over the environment. A backend's settings are read only when it is selected.\n",
    );
    for section in Section::ALL {
        out.push_str(&format!("\n{}:\n", section.title()));
        for spec in super::table::all().filter(|s| s.section == section) {
            out.push_str(&format!(
                "  -{:<27} {}\n      {}; default {}\n",
                flag_of(spec.name),
                spec.name,
                spec.help,
                default_text(spec)
            ));
        }
    }
    out.push_str("\n  -help       this text\n  -version    version and git commit\n");
    out
}

/// How `--help` shows a setting's default.
fn default_text(spec: &Spec) -> String {
    if spec.secret {
        String::from("(none; secret, never printed)")
    } else if spec.default.is_empty() {
        String::from("(none)")
    } else {
        spec.default.to_string()
    }
}

/// `docs/settings.md`: the same table as `--help`, as Markdown. A test compares the file
/// with this and the binary's `--help` with the file, so the reference cannot drift.
pub fn settings_markdown() -> String {
    let cell = |t: &str| t.replace('|', "\\|");
    let mut out = String::from(
        "# Settings\n\n\
         [README](../README.md) · [protocol](protocol.md) · [security](security.md) · \
         [docker](docker.md) · [kubernetes](kubernetes.md) · [local](local.md) · [templates](templates.md) · \
         [operations](operations.md) · **settings** · [performance](performance.md) · \
         [development](development.md)\n\n\
         <!-- Generated from src/settings/specs.rs, the table `--help` prints: do not edit by hand.\n\
         \x20    A2A_WRITE_DOCS=1 cargo test --test integration docs:: writes it again. -->\n\n\
         Every setting is an environment variable and a flag: `-max-workers=3`, `--max-workers 3`,\n\
         `--max-workers=3` and `MAX_WORKERS=3` are the same, and flags win. A backend's settings are\n\
         read only when it is selected. A missing or invalid setting stops startup with one line\n\
         naming it (exit code 2); an unknown flag is an error. `a2a-worker-controller --help` prints\n\
         this table; `a2a-worker-controller check` validates a set of settings and asks the backend\n\
         whether it answers ([operations](operations.md#check)). Secrets are never printed.\n",
    );
    for section in Section::ALL {
        out.push_str(&format!(
            "\n## {}\n\n| setting | flag | default | |\n|---|---|---|---|\n",
            section.title()
        ));
        for spec in super::table::all().filter(|s| s.section == section) {
            out.push_str(&format!(
                "| `{}` | `-{}` | {} | {} |\n",
                spec.name,
                flag_of(spec.name),
                cell(&default_text(spec)),
                cell(spec.help)
            ));
        }
    }
    out
}
