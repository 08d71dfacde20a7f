//! A workspace's files copied for another task (a fork): files with their contents, modes and
//! owners, directories with theirs, symbolic links as links — never followed, so a link that
//! points out of the workspace copies nothing from out there; sockets, FIFOs and device nodes,
//! which hold no contents, are left out. A leaf: the local backend copies
//! directories with [`copy_tree`], and the controller's `copy-files` subcommand (what the
//! Docker backend's short-lived copy container runs) copies one volume into another with
//! [`copy_into`].
//!
//! [`copy_tree`] makes the copy beside its destination under a name that marks it unfinished
//! and renames it into place when whole, so a copy cut off halfway (the controller killed) is
//! never taken for a workspace; [`remove_unfinished`] clears what such a copy left. (A volume
//! cannot be renamed: there a mark volume says the copy is unfinished.)

use std::fs;
use std::io;
use std::os::unix::fs::{lchown, symlink, MetadataExt, PermissionsExt};
use std::path::Path;

/// What marks a copy that is not finished: `<name>.copying-<nonce>`.
const UNFINISHED: &str = ".copying-";

/// What a copy made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub files: u64,
    pub bytes: u64,
    pub links: u64,
    pub dirs: u64,
    /// Sockets, FIFOs and device nodes, which hold no files' contents: left out.
    pub skipped: u64,
    /// Entries whose owner or mode could not be kept (a copy made by a user other than root, as
    /// on Kubernetes: they belong to that user, which is the workers' own; the destination's
    /// root, a fresh volume's, may be root's own).
    pub not_kept: u64,
}

/// Copies the directory `from` to `to`, which must not exist. `nonce` names the unfinished
/// copy (one per copy, so two copies never share it).
pub fn copy_tree(from: &Path, to: &Path, nonce: &str) -> io::Result<Copied> {
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists already", to.display()),
        ));
    }
    let name = to.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "a destination without a name")
    })?;
    let unfinished = to.with_file_name(format!("{}{UNFINISHED}{nonce}", name.to_string_lossy()));
    let mut copied = Copied::default();
    let made = copy_dir(from, &unfinished, &mut copied).and_then(|()| fs::rename(&unfinished, to));
    if let Err(e) = made {
        let _ = fs::remove_dir_all(&unfinished);
        return Err(e);
    }
    Ok(copied)
}

/// What a filesystem such as ext4 keeps at its root: not a task's file, never copied, and
/// allowed in a fresh volume that is otherwise empty.
const FILESYSTEMS_OWN: &str = "lost+found";

/// Copies what the directory `from` holds into the directory `into`, which must exist and be
/// empty (a fresh volume's mount point; a block volume's `lost+found` aside), then gives
/// `into` the mode and owner of `from`.
pub fn copy_into(from: &Path, into: &Path) -> io::Result<Copied> {
    let meta = directory(from)?;
    for entry in fs::read_dir(into)? {
        if entry?.file_name() != FILESYSTEMS_OWN {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is not empty", into.display()),
            ));
        }
    }
    let mut copied = Copied::default();
    copy_entries(from, into, &mut copied, Some(FILESYSTEMS_OWN))?;
    finish_dir(&meta, into, &mut copied)?;
    Ok(copied)
}

/// `from`'s metadata, when it is a directory.
fn directory(from: &Path) -> io::Result<fs::Metadata> {
    let meta = fs::symlink_metadata(from)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", from.display()),
        ));
    }
    Ok(meta)
}

/// Gives `target` the owner of `source` when they differ (a copy made as root: a copy made by
/// the files' own user changes nothing). The link itself, never what it points to. Not
/// permitted (a copy made by another user than root, which may not give files away) is
/// counted, not an error: the entry keeps the copier's owner.
fn keep_owner(source: &fs::Metadata, target: &Path, copied: &mut Copied) -> io::Result<()> {
    let made = fs::symlink_metadata(target)?;
    if (made.uid(), made.gid()) == (source.uid(), source.gid()) {
        return Ok(());
    }
    match lchown(target, Some(source.uid()), Some(source.gid())) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            copied.not_kept += 1;
            Ok(())
        }
        other => other,
    }
}

/// A filled directory's owner, then its mode (last, so a read-only directory was still filled).
/// A mode it may not set (a directory it does not own: a fresh volume's root, as a user other
/// than root) is counted, not an error.
fn finish_dir(meta: &fs::Metadata, to: &Path, copied: &mut Copied) -> io::Result<()> {
    keep_owner(meta, to, copied)?;
    let mode = meta.permissions().mode() & 0o7777;
    if fs::symlink_metadata(to)?.permissions().mode() & 0o7777 == mode {
        return Ok(());
    }
    match fs::set_permissions(to, fs::Permissions::from_mode(mode)) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            copied.not_kept += 1;
            Ok(())
        }
        other => other,
    }
}

/// Copies one directory, then its owner and mode.
fn copy_dir(from: &Path, to: &Path, copied: &mut Copied) -> io::Result<()> {
    let meta = directory(from)?;
    fs::create_dir(to)?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o700))?;
    copy_entries(from, to, copied, None)?;
    copied.dirs += 1;
    finish_dir(&meta, to, copied)
}

/// Copies the entries of directory `from` into directory `to`, but the one named `except`.
fn copy_entries(
    from: &Path,
    to: &Path,
    copied: &mut Copied,
    except: Option<&str>,
) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        if except.is_some_and(|name| entry.file_name() == name) {
            continue;
        }
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            symlink(fs::read_link(&source)?, &target)?;
            keep_owner(&fs::symlink_metadata(&source)?, &target, copied)?;
            copied.links += 1;
        } else if kind.is_dir() {
            copy_dir(&source, &target, copied)?;
        } else if kind.is_file() {
            copied.bytes += fs::copy(&source, &target)?;
            let meta = fs::symlink_metadata(&source)?;
            keep_owner(&meta, &target, copied)?;
            // A change of owner clears set-id bits: the mode again, after it.
            fs::set_permissions(
                &target,
                fs::Permissions::from_mode(meta.permissions().mode() & 0o7777),
            )?;
            copied.files += 1;
        } else {
            // A socket an agent's tool left, a FIFO, a device node: nothing to copy.
            copied.skipped += 1;
        }
    }
    Ok(())
}

/// Removes what copies cut off halfway left in `dir`; how many it removed.
pub fn remove_unfinished(dir: &Path) -> io::Result<usize> {
    let mut removed = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().contains(UNFINISHED) {
            let path = entry.path();
            // Made by this backend as a private, writable tree: writable again before removal.
            let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o700));
            fs::remove_dir_all(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("a2a-fork-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_copy_keeps_files_modes_and_links_and_never_follows_a_link_out() {
        let root = scratch("copy");
        let (src, dst) = (root.join("src"), root.join("dst"));
        fs::create_dir_all(src.join("sub/deeper")).unwrap();
        fs::write(src.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
        fs::set_permissions(src.join("run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
        fs::write(src.join("sub/notes.txt"), "half done").unwrap();
        fs::set_permissions(src.join("sub/notes.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::set_permissions(src.join("sub/deeper"), fs::Permissions::from_mode(0o555)).unwrap();
        symlink("sub/notes.txt", src.join("inside")).unwrap();
        let secret = root.join("outside-secret");
        fs::write(&secret, "not to be copied").unwrap();
        symlink(&secret, src.join("outside")).unwrap();

        let copied = copy_tree(&src, &dst, "n1").unwrap();
        assert_eq!(
            (copied.files, copied.links, copied.dirs),
            (2, 2, 3),
            "{copied:?}"
        );
        assert_eq!(
            fs::read_to_string(dst.join("sub/notes.txt")).unwrap(),
            "half done"
        );
        assert_eq!(mode(&dst.join("run.sh")), 0o750);
        assert_eq!(mode(&dst.join("sub/notes.txt")), 0o640);
        assert_eq!(mode(&dst.join("sub/deeper")), 0o555);
        assert_eq!(
            fs::read_link(dst.join("inside")).unwrap(),
            Path::new("sub/notes.txt")
        );
        // The link out is a link, as it was: nothing from out there came in.
        assert_eq!(fs::read_link(dst.join("outside")).unwrap(), secret);
        assert_eq!(copied.bytes, "#!/bin/sh\necho hi\n".len() as u64 + 9);
        // The source is untouched, and a second copy onto the first is refused.
        assert_eq!(
            fs::read_to_string(src.join("sub/notes.txt")).unwrap(),
            "half done"
        );
        let again = copy_tree(&src, &dst, "n2").unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        fs::set_permissions(dst.join("sub/deeper"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(src.join("sub/deeper"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_copy_into_an_empty_directory_fills_it_and_takes_the_source_mode() {
        let root = scratch("into");
        let (src, dst) = (root.join("src"), root.join("dst"));
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("sub/a"), "a").unwrap();
        symlink("../..", src.join("up")).unwrap();
        fs::set_permissions(&src, fs::Permissions::from_mode(0o751)).unwrap();
        fs::create_dir_all(&dst).unwrap();
        // A socket left by a tool in the workspace holds nothing to copy: left out.
        let _socket = std::os::unix::net::UnixListener::bind(src.join("tool.sock")).unwrap();
        let copied = copy_into(&src, &dst).unwrap();
        assert_eq!((copied.files, copied.links, copied.dirs), (1, 1, 1));
        assert_eq!(copied.skipped, 1);
        assert!(!dst.join("tool.sock").exists());
        assert_eq!(fs::read_to_string(dst.join("sub/a")).unwrap(), "a");
        assert_eq!(fs::read_link(dst.join("up")).unwrap(), Path::new("../.."));
        assert_eq!(mode(&dst), 0o751);
        // Never onto files already there.
        let again = copy_into(&src, &dst).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        // A block volume's own lost+found: allowed in the fresh volume, never copied.
        let (ext4, fresh) = (root.join("ext4"), root.join("fresh"));
        fs::create_dir_all(ext4.join("lost+found")).unwrap();
        fs::create_dir_all(fresh.join("lost+found")).unwrap();
        fs::write(ext4.join("lost+found/#1234"), "a filesystem's own").unwrap();
        fs::write(ext4.join("task.txt"), "the task's").unwrap();
        let copied = copy_into(&ext4, &fresh).unwrap();
        assert_eq!((copied.files, copied.dirs), (1, 0));
        assert!(fs::read_dir(fresh.join("lost+found"))
            .unwrap()
            .next()
            .is_none());
        assert_eq!(
            fs::read_to_string(fresh.join("task.txt")).unwrap(),
            "the task's"
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_copy_cut_off_halfway_is_never_in_place_and_is_cleared() {
        let root = scratch("cut");
        let (src, dst) = (root.join("src"), root.join("dst"));
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("a"), "a").unwrap();
        // What a killed copy leaves: the unfinished tree, no destination.
        fs::create_dir_all(root.join("dst.copying-dead/partial")).unwrap();
        assert!(!dst.exists());
        assert_eq!(remove_unfinished(&root).unwrap(), 1);
        assert!(!root.join("dst.copying-dead").exists());
        // A copy that fails (a source that is not a directory) leaves nothing either.
        let failed = copy_tree(&src.join("a"), &dst, "n3");
        assert!(failed.is_err());
        assert!(!dst.exists() && !root.join("dst.copying-n3").exists());
        copy_tree(&src, &dst, "n4").unwrap();
        assert_eq!(remove_unfinished(&root).unwrap(), 0);
        fs::remove_dir_all(&root).unwrap();
    }
}
