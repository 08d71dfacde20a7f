//! What a local worker's tab runs: the program (`LOCAL_COMMAND`, or a template's) checked at
//! startup, and its argument list with the placeholders filled in, each argument whole and never
//! through a shell.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::ConfigError;
use crate::backend::Template;

/// The tab's program and arguments (the template's, else `LOCAL_COMMAND`) with the
/// placeholders filled in, each argument whole; a template's `env` is set through
/// `/usr/bin/env` (a spawned tab inherits the GUI's environment, nothing of the CLI's).
pub(super) fn argv(
    own: &[String],
    template: &Template,
    task: &str,
    task_file: &Path,
    worker_id: &str,
    workspace: Option<&Path>,
    fenced: &[(String, String)],
) -> Vec<String> {
    let task_file = task_file.to_string_lossy();
    let command = if template.command.is_empty() {
        own
    } else {
        &template.command
    };
    let mut env: Vec<String> = template
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if let Some(w) = workspace {
        env.push(format!("A2A_WORKSPACE={}", w.display()));
    }
    // A fenced tab: its placeholder and the proxy instead of any model key the GUI holds.
    let unset: &[&str] = if fenced.is_empty() {
        &[]
    } else {
        &["-u", "ANTHROPIC_API_KEY"]
    };
    env.extend(fenced.iter().map(|(k, v)| format!("{k}={v}")));
    let prefix: Vec<String> = if env.is_empty() {
        Vec::new()
    } else {
        std::iter::once(ENV_PROGRAM.to_string())
            .chain(unset.iter().map(|s| s.to_string()))
            .chain(env)
            .collect()
    };
    let filled = command.iter().map(|arg| {
        substitute(
            arg,
            &[
                ("{task}", task),
                ("{task_file}", &task_file),
                ("{worker_id}", worker_id),
            ],
        )
    });
    prefix.into_iter().chain(filled).collect()
}

/// `LOCAL_WEZTERM` must name an executable file: launchd gives no PATH to find one by.
pub(super) fn check_program(path: &Path) -> Result<(), ConfigError> {
    let fail = |why: String| Err(ConfigError::Wezterm(format!("{} {why}", path.display())));
    match std::fs::metadata(path) {
        Err(e) => fail(format!(
            "cannot be used ({e}): install WezTerm or set LOCAL_WEZTERM to the absolute path of its wezterm program"
        )),
        Ok(m) if !m.is_file() => fail("is not a file: name the wezterm program itself".into()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => fail("is not executable".into()),
        Ok(_) => Ok(()),
    }
}

/// The program a template's `env` is set through.
const ENV_PROGRAM: &str = "/usr/bin/env";

/// `LOCAL_COMMAND`'s program (or a template's) must be an absolute path to an executable file:
/// WezTerm keeps the tab of a program it cannot start open with its error, which would look
/// like a worker.
pub(super) fn check_command(command: &[String]) -> Result<(), ConfigError> {
    let Some(program) = command.first() else {
        return Err(ConfigError::Command("it names no program".into()));
    };
    let path = Path::new(program);
    if !path.is_absolute() {
        return Err(ConfigError::Command(format!(
            "its program {program:?} is not an absolute path (a LaunchAgent has no PATH to find it by)"
        )));
    }
    match std::fs::metadata(path) {
        Err(e) => Err(ConfigError::Command(format!(
            "its program {program} cannot be used ({e})"
        ))),
        Ok(m) if !m.is_file() => Err(ConfigError::Command(format!(
            "its program {program} is not a file"
        ))),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err(ConfigError::Command(format!(
            "its program {program} is not executable"
        ))),
        Ok(_) => Ok(()),
    }
}

/// Replaces each placeholder in one pass, so a value that looks like a placeholder is kept
/// as it is.
fn substitute(arg: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    'scan: while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        for (name, value) in values {
            if let Some(after) = rest.strip_prefix(name) {
                out.push_str(value);
                rest = after;
                continue 'scan;
            }
        }
        out.push('{');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_once_per_argument() {
        let v = [
            ("{task}", "{worker_id}"),
            ("{task_file}", "/t/x.md"),
            ("{worker_id}", "w1"),
        ];
        assert_eq!(substitute("--task={task}", &v), "--task={worker_id}");
        assert_eq!(substitute("{task_file}:{worker_id}", &v), "/t/x.md:w1");
        assert_eq!(substitute("{other} {", &v), "{other} {");
        assert_eq!(substitute("{{task}}", &v), "{{worker_id}}");
    }

    #[test]
    fn a_fenced_tab_gets_its_placeholder_and_the_proxy_never_a_key() {
        let mut t = Template::new("coder", "", 0);
        t.egress =
            crate::settings::egress::parse_egress(&serde_json::json!(["api.github.com:443"]))
                .unwrap();
        let fence = crate::settings::Fence {
            proxy_url: "http://127.0.0.1:8790".into(),
            key: crate::settings::egress::EgressKey::new(b"sixteen characters key"),
        };
        let fenced = crate::backend::worker_env::fenced_env("w1", &t, &fence);
        let own = vec!["/bin/agent".to_string(), "{task}".into()];
        let argv = argv(
            &own,
            &t,
            "fix it",
            Path::new("/t/x.md"),
            "w1",
            None,
            &fenced,
        );
        assert_eq!(&argv[..3], ["/usr/bin/env", "-u", "ANTHROPIC_API_KEY"]);
        let placeholder = fence.key.placeholder("w1");
        assert!(argv.contains(&format!("ANTHROPIC_AUTH_TOKEN={}", placeholder.expose())));
        assert!(argv.contains(&"ANTHROPIC_BASE_URL=http://127.0.0.1:8790/model".to_string()));
        assert!(argv.contains(&format!(
            "HTTPS_PROXY=http://w1:{}@127.0.0.1:8790",
            placeholder.expose()
        )));
        assert_eq!(&argv[argv.len() - 2..], ["/bin/agent", "fix it"]);
        // An open template's tab is as it was: no env program at all.
        let open = Template::new("plain", "", 0);
        assert_eq!(argv_of_open(&open), ["/bin/agent"]);
    }

    fn argv_of_open(t: &Template) -> Vec<String> {
        argv(
            &["/bin/agent".to_string()],
            t,
            "x",
            Path::new("/t/x.md"),
            "w1",
            None,
            &[],
        )
    }
}
