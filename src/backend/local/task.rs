//! Task files: a local worker's task names a file `<LOCAL_TASK_DIR>/<task>.md`, and the name
//! must never lead anywhere else (no separators, no `..`, no leading dot, no control
//! characters, no symlink out of the directory) — checked before anything runs. The file's
//! YAML front matter may hold `claude_session_id`, the Claude Code session bound to the task;
//! nothing else of the file is read.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// The task file for `task`, or why the name is refused.
/// Where a task's file is, without looking at the file system: `None` for a name
/// [`task_file`] refuses outright.
pub fn task_file_path(task_dir: &Path, task: &str) -> Option<PathBuf> {
    let refused = task.contains(['/', '\\', '\0'])
        || task.starts_with('.')
        || task.contains("..")
        || task.chars().any(char::is_control);
    (!refused).then(|| task_dir.join(format!("{task}.md")))
}

pub fn task_file(task_dir: &Path, task: &str) -> Result<PathBuf, String> {
    if task.contains(['/', '\\', '\0']) {
        return Err("a local task name must not contain path separators".into());
    }
    if task.starts_with('.') || task == ".." {
        return Err("a local task name must not start with a dot".into());
    }
    if task.contains("..") {
        return Err("a local task name must not contain \"..\"".into());
    }
    if task.chars().any(char::is_control) {
        return Err("a local task name must not contain control characters".into());
    }
    let path = task_dir.join(format!("{task}.md"));
    let dir = fs::canonicalize(task_dir)
        .map_err(|e| format!("LOCAL_TASK_DIR {} cannot be read: {e}", task_dir.display()))?;
    match fs::canonicalize(&path) {
        Ok(real) if real.parent() != Some(dir.as_path()) => Err(format!(
            "the task file {} resolves outside LOCAL_TASK_DIR",
            path.display()
        )),
        Ok(_) => Ok(path),
        // No file (yet): with no separator in the name it can only be in the directory,
        // unless it is a dangling symlink, which is refused too.
        Err(_) if fs::symlink_metadata(&path).is_ok() => Err(format!(
            "the task file {} is a link to nowhere",
            path.display()
        )),
        Err(_) => Ok(path),
    }
}

/// The task file's `claude_session_id` from its YAML front matter (`---` ... `---` at the top);
/// `None` when the file, the front matter or the value is absent or empty.
pub fn session_id(task_file: &Path) -> Option<String> {
    let file = fs::File::open(task_file).ok()?;
    let mut lines = BufReader::new(file).lines().map_while(Result::ok);
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    for line in lines.take(200) {
        let line = line.trim_end();
        if line == "---" || line == "..." {
            return None;
        }
        if let Some(value) = line.strip_prefix("claude_session_id:") {
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value)
                .trim();
            return (!value.is_empty() && value != "null" && value != "~")
                .then(|| value.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("a2a-tasks-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn names_that_would_leave_the_directory_are_refused() {
        let d = dir("names");
        let outside = dir("outside");
        fs::write(outside.join("secret.md"), "x").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.md"), d.join("linked.md")).unwrap();
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling.md")).unwrap();
        fs::write(d.join("fine.md"), "x").unwrap();
        for bad in [
            "../x",
            "a/b",
            "a\\b",
            "..",
            ".hidden",
            "a..b",
            "tab\there",
            "linked",
            "dangling",
        ] {
            assert!(task_file(&d, bad).is_err(), "{bad}");
        }
        assert_eq!(task_file(&d, "fine").unwrap(), d.join("fine.md"));
        assert_eq!(
            task_file(&d, "new task ✓").unwrap(),
            d.join("new task ✓.md")
        );
        let _ = fs::remove_dir_all(&d);
        let _ = fs::remove_dir_all(&outside);
    }

    #[test]
    fn the_session_id_comes_from_the_front_matter_only() {
        let d = dir("session");
        let f = d.join("t.md");
        for (text, want) in [
            (
                "---\ntitle: x\nclaude_session_id: abc-123\n---\nbody\n",
                Some("abc-123"),
            ),
            ("---\nclaude_session_id: \"q-1\"\n---\n", Some("q-1")),
            ("---\nclaude_session_id:\n---\n", None),
            ("---\nclaude_session_id: null\n---\n", None),
            ("---\ntitle: x\n---\nclaude_session_id: in-body\n", None),
            ("no front matter\nclaude_session_id: x\n", None),
        ] {
            fs::write(&f, text).unwrap();
            assert_eq!(session_id(&f).as_deref(), want, "{text:?}");
        }
        assert_eq!(session_id(&d.join("absent.md")), None);
        let _ = fs::remove_dir_all(&d);
    }
}
