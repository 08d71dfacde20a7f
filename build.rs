// Embeds the git commit the binary was built from (`--version`, build_info metric).
// Outside a git checkout (e.g. a source tarball) it says "unknown"; A2A_WC_GIT_COMMIT
// in the build environment overrides it (for reproducible builds from audited sources).
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=A2A_WC_GIT_COMMIT");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    let commit = std::env::var("A2A_WC_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            let hash = String::from_utf8(out.stdout).ok()?.trim().to_string();
            (out.status.success() && !hash.is_empty()).then_some(hash)
        });
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success() && !o.stdout.is_empty())
        .is_some();
    let commit = match commit {
        Some(c) if dirty && std::env::var("A2A_WC_GIT_COMMIT").is_err() => format!("{c}-dirty"),
        Some(c) => c,
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=A2A_WC_GIT_COMMIT={commit}");
}
