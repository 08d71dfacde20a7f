#!/usr/bin/env bash
# Installs or updates the controller as a macOS LaunchAgent, the way the operator's routine does:
#
#   build (release, --locked) → ~/.local/bin/a2a-worker-controller.new → codesign → verify
#   → prepare the plist (ThrottleInterval 30, SoftResourceLimits.NumberOfFiles 4096; linted)
#   → rename the binary into place → rename the plist into place → launchctl bootout + bootstrap
#
# The binary is only ever replaced by a rename: macOS SIGKILLs the next exec of a signed file
# that was modified in place, and under KeepAlive that is a crash loop. Every step before the
# rename can fail without touching the installed binary or the running job.
#
#   scripts/install.sh [--binary PATH]     (--binary: install a binary built elsewhere)
#
# Settings (environment):
#   A2A_CODESIGN_IDENTITY  the signing identity in your keychain (required)
#   A2A_LAUNCHD_LABEL      default com.bborbe.a2a-worker-controller
#   A2A_BIN_DIR            default ~/.local/bin
# The wrapper (launchd/a2a-worker-controller.sh) is installed beside the binary when none is
# there; the plist (launchd/a2a-worker-controller.plist) when none is installed: both are yours
# afterwards, and only the two keys above are set in an existing plist.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "install: $*"; }
die() { echo "install: $*" >&2; exit 1; }

binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=${2:?--binary needs a path}; shift 2 ;;
    *) die "unknown argument $1 (usage: scripts/install.sh [--binary PATH])" ;;
  esac
done

identity=${A2A_CODESIGN_IDENTITY:-}
[ -n "$identity" ] || die "set A2A_CODESIGN_IDENTITY to your code-signing identity (security find-identity -p codesigning)"
label=${A2A_LAUNCHD_LABEL:-com.bborbe.a2a-worker-controller}
bin_dir=${A2A_BIN_DIR:-$HOME/.local/bin}
agents="$HOME/Library/LaunchAgents"
plist="$agents/$label.plist"
installed="$bin_dir/a2a-worker-controller"
new="$installed.new"
plistbuddy=/usr/libexec/PlistBuddy
[ -x "$plistbuddy" ] || plistbuddy=$(command -v PlistBuddy || true)
for tool in codesign launchctl; do
  command -v "$tool" >/dev/null || die "$tool not found: LaunchAgents are a macOS feature"
done
[ -n "$plistbuddy" ] || die "PlistBuddy not found (/usr/libexec/PlistBuddy on macOS)"

if [ -z "$binary" ]; then
  say "building (release, --locked)"
  cargo build --release --locked --quiet --bin a2a-worker-controller
  binary=target/release/a2a-worker-controller
fi
[ -x "$binary" ] || die "$binary is not an executable file"

mkdir -p "$bin_dir" "$agents" "$HOME/Library/Logs"
staged_plist="$plist.new"
cleanup() { rm -f "$new" "$staged_plist"; }
trap cleanup EXIT

say "staging $new"
cp "$binary" "$new"
chmod 0755 "$new"
say "signing with $identity"
codesign --force --sign "$identity" "$new" || die "codesign failed; nothing was replaced"
codesign --verify --strict "$new" || die "the signature does not verify; nothing was replaced"

if [ -f "$plist" ]; then
  cp "$plist" "$staged_plist"
else
  sed -e "s|@LABEL@|$label|g" -e "s|@BINDIR@|$bin_dir|g" -e "s|@HOME@|$HOME|g" \
    launchd/a2a-worker-controller.plist >"$staged_plist"
fi
set_key() { # key type value
  "$plistbuddy" -c "Set :$1 $3" "$staged_plist" 2>/dev/null \
    || "$plistbuddy" -c "Add :$1 $2 $3" "$staged_plist" \
    || die "cannot set $1 in the plist; nothing was replaced"
}
set_key ThrottleInterval integer 30
"$plistbuddy" -c "Print :SoftResourceLimits" "$staged_plist" >/dev/null 2>&1 \
  || "$plistbuddy" -c "Add :SoftResourceLimits dict" "$staged_plist" \
  || die "cannot add SoftResourceLimits to the plist; nothing was replaced"
set_key SoftResourceLimits:NumberOfFiles integer 4096
if command -v plutil >/dev/null; then
  plutil -lint "$staged_plist" >/dev/null || die "the plist does not lint; nothing was replaced"
fi

if [ ! -e "$bin_dir/a2a-worker-controller.sh" ]; then
  say "installing the wrapper $bin_dir/a2a-worker-controller.sh (yours from now on)"
  cp launchd/a2a-worker-controller.sh "$bin_dir/a2a-worker-controller.sh.new"
  chmod 0755 "$bin_dir/a2a-worker-controller.sh.new"
  mv -f "$bin_dir/a2a-worker-controller.sh.new" "$bin_dir/a2a-worker-controller.sh"
fi

say "moving the signed binary into place (rename, never a copy over it)"
mv -f "$new" "$installed"
mv -f "$staged_plist" "$plist"

domain="gui/$(id -u)"
say "reloading $label"
launchctl bootout "$domain/$label" 2>/dev/null || true
launchctl bootstrap "$domain" "$plist" \
  || die "launchctl bootstrap failed: the new binary is installed but the job is not loaded (launchctl bootstrap $domain $plist)"
say "installed $("$installed" --version)"
