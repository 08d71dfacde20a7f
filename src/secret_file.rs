//! Secrets read from files: the controller's token, a callers file, the model key, a pool key,
//! a template's env files. One reader for all of them: a size bound, UTF-8, surrounding
//! whitespace trimmed, and a warning when others may read the file. Errors name the file, never
//! its contents.

use std::path::Path;

/// This process's effective group on Linux (a group-readable secret of one's own group, as
/// Kubernetes mounts one with `fsGroup`, is not "others"); `None` elsewhere.
fn own_group() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Gid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The most a secret file may hold.
const SECRET_FILE_CAP: u64 = 64 << 10;

/// A secret from a file (surrounding whitespace and the final newline removed), and a warning
/// when others may read the file. Errors name the file, never its contents.
pub fn read_secret_file(path: &Path) -> Result<(String, Option<String>), String> {
    read_secret_file_up_to(path, SECRET_FILE_CAP)
}

/// The same for a file of at most `cap` bytes (a callers file is larger than a token).
pub fn read_secret_file_up_to(path: &Path, cap: u64) -> Result<(String, Option<String>), String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mode, group) = file
        .metadata()
        .map(|m| (m.mode(), Some(m.gid())))
        .unwrap_or((0o600, None));
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > cap {
        return Err(format!(
            "{} is larger than {} KiB",
            path.display(),
            cap >> 10
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    let group_is_ours = own_group().is_some_and(|gid| Some(gid) == group);
    let wide = mode & 0o007 != 0 || (mode & 0o070 != 0 && !group_is_ours);
    let warning = wide.then(|| {
        format!(
            "{} holds a secret but its mode is {:04o}: others may read it; make it 0600",
            path.display(),
            mode & 0o7777
        )
    });
    Ok((text.trim().to_string(), warning))
}
