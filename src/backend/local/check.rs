//! What the local backend validates: a template without WezTerm (its program is usable, it
//! names no secrets a command line would show), a task's name (its task file stays in
//! `LOCAL_TASK_DIR`, in `mod.rs`), and with WezTerm — the GUI answers — for `check`.

use super::command;
use super::gui;
use super::ConfigError;
use super::LocalBackend;
use crate::backend::{Finding, Refusal, Template};

/// A fenced template on local tabs needs the proxy (`EGRESS_PROXY_URL`); a runtime does not
/// apply to a tab.
pub(super) fn isolation_refusal(t: &Template, proxy_set: bool) -> Result<(), Refusal> {
    crate::backend::validation::fence_refusal(t, proxy_set)?;
    if t.runtime.is_some() {
        return Err(Refusal::new(
            "runtime",
            "does not apply to local tabs: a tab runs on this machine, not in an OCI runtime",
        ));
    }
    Ok(())
}

impl LocalBackend {
    /// The GUI answers, and is the one the controller would use.
    pub(super) fn gui_findings(&self) -> Vec<Finding> {
        let gui = match self.discovery.current() {
            Ok(gui) => gui,
            // launchd starts the controller at login, often before WezTerm: not an error.
            Err(why) => {
                return vec![Finding::ok(format!(
                    "configured; {why} (the controller starts anyway and creates once a GUI runs)"
                ))]
            }
        };
        let mut out = vec![match self.cli.list(&gui) {
            Ok(panes) => Finding::ok(format!(
                "WezTerm GUI {} answers ({} pane(s))",
                gui.display(),
                panes.len()
            )),
            Err(e) => Finding::failed(format!("WezTerm GUI {}: {e}", gui.display())),
        }];
        if let Err(why) = gui::instance(&gui) {
            out.push(Finding::failed(why));
        }
        out
    }

    /// The template's program must be usable as `LOCAL_COMMAND`'s is; its secrets cannot be
    /// given to a tab without showing in its command line.
    pub(super) fn template_refusal(&self, template: &Template) -> Result<(), Refusal> {
        if !template.env_files.is_empty() {
            return Err(Refusal::new("env_files", "does not apply to local tabs: a tab gets its variables on its command line, where others could read a secret; let the program read the file itself"));
        }
        if !template.command.is_empty() {
            command::check_command(&template.command).map_err(|e| match e {
                ConfigError::Command(why) => Refusal::new("command", why),
                other => Refusal::new("command", other.to_string()),
            })?;
        }
        Ok(())
    }

    pub(super) fn template_finding(&self, template: &Template) -> Finding {
        let refused = self
            .template_refusal(template)
            .and_then(|()| isolation_refusal(template, self.fence.is_some()));
        let advisory = if template.egress.fenced() {
            format!("; egress {} is advisory on local tabs (a tab cannot be fenced: it reaches what this machine reaches), but the tab holds its placeholder and the proxy its keys", template.egress.describe())
        } else {
            String::new()
        };
        match refused {
            Ok(()) => Finding::ok(format!(
                "program {} is executable{advisory}",
                template
                    .command
                    .first()
                    .or(self.command.first())
                    .map_or("", String::as_str)
            )),
            Err(why) => Finding::failed(why),
        }
    }
}
