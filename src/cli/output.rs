//! Tables for people: aligned columns, one worker per line, nothing that could move the
//! terminal (control characters in a task name are shown as `?`).

use serde_json::Value;

const COLUMNS: &[&str] = &[
    "WORKER_ID",
    "TASK",
    "SCOPE",
    "BACKEND",
    "TEMPLATE",
    "STATE",
    "CREATED",
    "EXPIRES",
    "WHERE",
    "META",
    "REASON",
];

/// A JSON string as one safe cell (`-` when empty).
pub fn cell(v: &Value) -> String {
    let text = v.as_str().unwrap_or("");
    if text.is_empty() {
        return "-".into();
    }
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn row(w: &Value) -> Vec<String> {
    let place = match (w["a2a_url"].as_str(), w["pane_id"].as_str()) {
        (Some(url), _) if !url.is_empty() => url.to_string(),
        (_, Some(pane)) if !pane.is_empty() => {
            let session = w["session_id"].as_str().unwrap_or("");
            if session.is_empty() {
                format!("pane {pane}")
            } else {
                format!("pane {pane}, session {session}")
            }
        }
        _ => String::new(),
    };
    // `key=value,key=value`, in key order.
    let meta = w["metadata"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    vec![
        cell(&w["worker_id"]),
        cell(&w["task"]),
        cell(&w["scope"]),
        cell(&w["backend"]),
        cell(&w["template"]),
        cell(&w["state"]),
        cell(&w["created_at"]),
        cell(&w["expires_at"]),
        cell(&Value::String(place)),
        cell(&Value::String(meta)),
        cell(&w["reason"]),
    ]
}

/// A watch event as one line for people: what, the worker, its task and state, and why.
pub fn event_line(event: &Value) -> String {
    let w = &event["worker"];
    let mut line = format!("{} {}", cell(&event["at"]), cell(&event["type"]));
    if w.is_object() {
        line.push_str(&format!(
            " {} task {} {}",
            cell(&w["worker_id"]),
            cell(&w["task"]),
            cell(&w["state"])
        ));
    }
    if event["reason"].as_str().is_some_and(|r| !r.is_empty()) {
        line.push_str(&format!(": {}", cell(&event["reason"])));
    }
    line
}

/// Where SCOPE is in [`COLUMNS`].
const SCOPE_COLUMN: usize = 2;

/// The templates as an aligned table: name, image or program, limits, TTLs, workspace.
pub fn template_table(templates: &[Value]) -> String {
    let header: Vec<String> = [
        "TEMPLATE",
        "IMAGE",
        "MEMORY",
        "CPUS",
        "TTL",
        "MAX_TTL",
        "WORKSPACE",
        "DESCRIPTION",
    ]
    .iter()
    .map(|c| c.to_string())
    .collect();
    let secs = |v: &Value| {
        v.as_u64().map_or("-".to_string(), |s| {
            crate::time::duration_text(std::time::Duration::from_secs(s))
        })
    };
    let rows: Vec<Vec<String>> = templates
        .iter()
        .map(|t| {
            vec![
                cell(&t["name"]),
                cell(&t["image"]),
                t["memory_bytes"]
                    .as_u64()
                    .map_or("-".into(), |b| format!("{}m", b >> 20)),
                t["cpus"].as_f64().map_or("-".into(), |c| c.to_string()),
                secs(&t["ttl"]),
                secs(&t["max_ttl"]),
                match (
                    t["workspace"]["path"].as_str(),
                    t["workspace"]["size"].as_str(),
                ) {
                    (Some(p), Some(s)) => cell(&Value::String(format!("{p} ({s})"))),
                    _ => "-".into(),
                },
                cell(&t["description"]),
            ]
        })
        .collect();
    aligned(header, rows)
}

/// The task workspaces as an aligned table.
pub fn workspace_table(spaces: &[Value]) -> String {
    let header: Vec<String> = [
        "TASK",
        "SCOPE",
        "TEMPLATE",
        "SIZE",
        "CREATED",
        "LAST_USED",
        "IN_USE",
        "NAME",
    ]
    .iter()
    .map(|c| c.to_string())
    .collect();
    let rows = spaces
        .iter()
        .map(|w| {
            vec![
                cell(&w["task"]),
                cell(&w["scope"]),
                cell(&w["template"]),
                cell(&w["size"]),
                cell(&w["created_at"]),
                cell(&w["last_used"]),
                if w["in_use"] == Value::Bool(true) {
                    "yes".into()
                } else {
                    "no".into()
                },
                cell(&w["name"]),
            ]
        })
        .collect();
    aligned(header, rows)
}

/// Cells in aligned columns, two spaces apart, one line per row.
fn aligned(header: Vec<String>, rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|c| c.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut text = String::new();
        let last = cells.len() - 1;
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            text.push_str(c);
            if i < last {
                text.extend(std::iter::repeat_n(' ', w - c.chars().count() + 2));
            }
        }
        text.push('\n');
        text
    };
    let mut out = line(header);
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

/// The workers as an aligned table with a header line. SCOPE is shown when scopes are in use
/// (some worker is outside the admin scope: an admin's list shows whose is whose).
pub fn worker_table(workers: &[Value]) -> String {
    let scoped = workers
        .iter()
        .any(|w| w["scope"].as_str().is_some_and(|s| s != "admin"));
    let keep = |mut cells: Vec<String>| {
        if !scoped {
            cells.remove(SCOPE_COLUMN);
        }
        cells
    };
    let rows: Vec<Vec<String>> = workers.iter().map(|w| keep(row(w))).collect();
    let header = keep(COLUMNS.iter().map(|c| c.to_string()).collect());
    aligned(header, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_align_and_cells_are_safe() {
        let table = worker_table(&[
            json!({"worker_id": "a1", "task": "fix\u{1b}[2J it", "backend": "docker", "state": "running",
                "created_at": "2026-11-30T07:00:00Z", "a2a_url": "http://127.0.0.1:49152", "pane_id": "", "reason": ""}),
            json!({"worker_id": "b22", "task": "t", "backend": "local", "state": "unknown",
                "created_at": "2026-11-30T07:00:01Z", "a2a_url": "", "pane_id": "7", "session_id": "s-1", "reason": "GUI does not answer"}),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        let at = |l: &str| {
            l.find("docker")
                .or_else(|| l.find("local"))
                .or_else(|| l.find("BACKEND"))
        };
        assert_eq!(at(lines[0]), at(lines[1]));
        assert_eq!(at(lines[1]), at(lines[2]));
        assert!(lines[1].contains("fix?[2J it") && !table.contains('\u{1b}'));
        assert!(lines[2].contains("pane 7, session s-1"));
        assert!(lines[1].ends_with(" -"), "{}", lines[1]);
        assert!(
            !lines[0].contains("SCOPE"),
            "no scopes in use: no SCOPE column"
        );
        let scoped = worker_table(&[
            json!({"worker_id": "a1", "task": "t", "scope": "admin", "backend": "docker"}),
            json!({"worker_id": "b2", "task": "t", "scope": "team-a", "backend": "docker"}),
        ]);
        let lines: Vec<&str> = scoped.lines().collect();
        assert!(
            lines[0].starts_with("WORKER_ID  TASK  SCOPE   BACKEND"),
            "{}",
            lines[0]
        );
        assert!(lines[2].contains("team-a"));
    }
}
