//! What a message may ask of the echo worker besides an echo: `workspace write|read|chmod|
//! link|stat|fill ...` in its task's workspace, and `net connect|tunnel|route ...`, what its network reaches (the egress
//! tests ask it).

/// `write NAME TEXT` or `read NAME` in the directory `A2A_WORKSPACE` names; the answer is
/// the outcome in words (a worker answers, it does not fail the call).
pub(super) fn workspace(command: &str) -> String {
    let Some(dir) = std::env::var_os("A2A_WORKSPACE") else {
        return "no workspace: A2A_WORKSPACE is not set".into();
    };
    files_in(std::path::PathBuf::from(dir), command)
}

/// `write NAME TEXT` or `read NAME` in the image's own `/workspace` (the container's writable
/// layer when no volume is mounted there).
pub(super) fn disk(command: &str) -> String {
    files_in(std::path::PathBuf::from("/workspace"), command)
}

fn files_in(dir: std::path::PathBuf, command: &str) -> String {
    let safe = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            && !n.starts_with('.')
    };
    let (verb, rest) = command.split_once(' ').unwrap_or((command, ""));
    match verb {
        "write" => {
            let (name, body) = rest.split_once(' ').unwrap_or((rest, ""));
            if !safe(name) {
                return format!("not a file name: {name:?}");
            }
            match std::fs::write(dir.join(name), body) {
                Ok(()) => format!("wrote {name}"),
                Err(e) => format!("cannot write {name}: {e}"),
            }
        }
        "read" if safe(rest) => match std::fs::read_to_string(dir.join(rest)) {
            Ok(text) => text,
            Err(e) => format!("cannot read {rest}: {e}"),
        },
        "read" => format!("not a file name: {rest:?}"),
        // `chmod NAME OCTAL`: the file's mode.
        "chmod" => {
            use std::os::unix::fs::PermissionsExt;
            let (name, mode) = rest.split_once(' ').unwrap_or((rest, ""));
            let Ok(mode) = u32::from_str_radix(mode, 8) else {
                return format!("not an octal mode: {mode:?}");
            };
            if !safe(name) {
                return format!("not a file name: {name:?}");
            }
            match std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(mode)) {
                Ok(()) => format!("mode of {name} is {mode:o}"),
                Err(e) => format!("cannot chmod {name}: {e}"),
            }
        }
        // `link NAME TARGET`: a symbolic link NAME to TARGET (any path, never followed here).
        "link" => {
            let (name, target) = rest.split_once(' ').unwrap_or((rest, ""));
            if !safe(name) || target.is_empty() {
                return format!("link NAME TARGET, not {rest:?}");
            }
            match std::os::unix::fs::symlink(target, dir.join(name)) {
                Ok(()) => format!("linked {name}"),
                Err(e) => format!("cannot link {name}: {e}"),
            }
        }
        // `stat NAME`: `link -> TARGET`, or `file MODE OWNER`, in words.
        "stat" if safe(rest) => {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            match std::fs::symlink_metadata(dir.join(rest)) {
                Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(dir.join(rest)) {
                    Ok(t) => format!("link -> {}", t.display()),
                    Err(e) => format!("cannot read the link {rest}: {e}"),
                },
                Ok(m) => format!(
                    "{} {:o} {}:{}",
                    if m.is_dir() { "dir" } else { "file" },
                    m.permissions().mode() & 0o7777,
                    m.uid(),
                    m.gid()
                ),
                Err(e) => format!("cannot stat {rest}: {e}"),
            }
        }
        // `fill NAME MIB`: a file of MIB mebibytes (a large workspace to copy).
        "fill" => {
            use std::io::Write;
            let (name, mib) = rest.split_once(' ').unwrap_or((rest, ""));
            let Ok(mib) = mib.parse::<usize>() else {
                return format!("not a size in MiB: {mib:?}");
            };
            if !safe(name) {
                return format!("not a file name: {name:?}");
            }
            let block = vec![b'x'; 1 << 20];
            let filled = std::fs::File::create(dir.join(name))
                .and_then(|mut f| (0..mib).try_for_each(|_| f.write_all(&block)));
            match filled {
                Ok(()) => format!("filled {name}"),
                Err(e) => format!("cannot fill {name}: {e}"),
            }
        }
        other => format!(
            "unknown workspace command {other:?}: write NAME TEXT, read NAME, chmod NAME MODE, link NAME TARGET, stat NAME, or fill NAME MIB"
        ),
    }
}

/// What this worker's network reaches, in words (for the egress tests):
/// `connect HOST:PORT` (directly), `tunnel HOST:PORT PATH` (a CONNECT through `HTTPS_PROXY`,
/// then `GET PATH` inside), `route NAME PATH` (`GET` on `A2A_EGRESS_ROUTE_NAME` with the
/// placeholder `A2A_EGRESS_TOKEN` as the bearer token).
pub(super) fn net(command: &str) -> String {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    let timeout = std::time::Duration::from_secs(3);
    let open = |target: &str| -> Result<TcpStream, String> {
        let addr = target
            .to_socket_addrs()
            .map_err(|e| format!("{target} does not resolve: {e}"))?
            .next()
            .ok_or_else(|| format!("{target} has no address"))?;
        let s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
        let _ = s.set_read_timeout(Some(timeout));
        Ok(s)
    };
    let exchange = |s: &mut TcpStream, request: String| -> String {
        let mut out = Vec::new();
        if s.write_all(request.as_bytes()).is_err() {
            return "the write failed".into();
        }
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.as_slice() {
        ["connect", target] => match open(target) {
            Ok(_) => "connected".into(),
            Err(e) => format!("failed: {e}"),
        },
        ["tunnel", target, path] => net_tunnel(target, path, &open, &exchange),
        ["route", name, path] => {
            let var = format!("A2A_EGRESS_ROUTE_{}", name.to_ascii_uppercase().replace('-', "_"));
            let (Ok(url), Ok(token)) = (std::env::var(&var), std::env::var("A2A_EGRESS_TOKEN")) else {
                return format!("no {var} or A2A_EGRESS_TOKEN");
            };
            let rest = url.trim_start_matches("http://");
            let (host, base) = rest.split_once('/').unwrap_or((rest, ""));
            let mut s = match open(host) {
                Ok(s) => s,
                Err(e) => return format!("the proxy is unreachable: {e}"),
            };
            let answer = exchange(
                &mut s,
                format!("GET /{base}{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"),
            );
            let status = answer.lines().next().unwrap_or("").to_string();
            let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
            format!("{status} | {}", body.trim())
        }
        _ => format!("unknown net command {command:?}: connect HOST:PORT, tunnel HOST:PORT PATH, or route NAME PATH"),
    }
}

/// `tunnel HOST:PORT PATH`: a CONNECT through `HTTPS_PROXY` (its credentials as Basic), then
/// `GET PATH` inside; the proxy's refusal, or the first line of the answer.
fn net_tunnel(
    target: &str,
    path: &str,
    open: &dyn Fn(&str) -> Result<std::net::TcpStream, String>,
    exchange: &dyn Fn(&mut std::net::TcpStream, String) -> String,
) -> String {
    use std::io::{Read, Write};
    let Some(proxy) = std::env::var("HTTPS_PROXY").ok() else {
        return "no HTTPS_PROXY".into();
    };
    let rest = proxy.trim_start_matches("http://");
    let (creds, host) = rest.rsplit_once('@').unwrap_or(("", rest));
    let mut s = match open(host.trim_end_matches('/')) {
        Ok(s) => s,
        Err(e) => return format!("the proxy is unreachable: {e}"),
    };
    let head = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {}\r\n\r\n",
        base64(creds.as_bytes())
    );
    if s.write_all(head.as_bytes()).is_err() {
        return "the write failed".into();
    }
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        got.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    if !status.contains(" 200 ") {
        let mut why = String::new();
        let _ = s.read_to_string(&mut why);
        return format!("refused: {status}: {}", why.trim());
    }
    let inside = exchange(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"),
    );
    format!("tunnel: {}", inside.lines().next().unwrap_or(""))
}

/// Standard base64, padded.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                ABC[((n >> (18 - 6 * i)) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}
