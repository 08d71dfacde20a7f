#!/usr/bin/env bash
# The Kubernetes suite for a real cluster (k3s, kind, a bare node): builds the controller and
# echo worker images, loads them with the command you name, deploys scripts/k8s/ as the
# README says (namespace a2a, the auth Secret, kubectl apply), runs the scenarios of
# tests/python/k8s_cluster.py against it, and removes all it made (the namespace a2a and its
# images' archive; the images it loaded stay on the nodes, as the README's deploy steps leave
# them: remove a2a-echo-worker:grow there with your runtime's command, e.g. k3s ctr images rm). Run it on a node of the cluster: the scenarios reach the Service's
# ClusterIP and the pods' IPs from here, as a caller in the cluster would.
#
#   scripts/test-k8s.sh --load 'k3s ctr images import -'          # k3s (as root on the node)
#   scripts/test-k8s.sh --load 'kind load image-archive {}'        # kind ({} = the archive)
#   scripts/test-k8s.sh --kubeconfig FILE --load 'ctr -n k8s.io images import -'
#
# --load CMD     how images reach the nodes: CMD reads a docker-save archive on stdin, or from
#                the path {} stands for (required unless --no-build)
# --kubeconfig F the cluster (default: kubectl's own: $KUBECONFIG, ~/.kube/config)
# --no-build     the images a2a-worker-controller:dev, a2a-echo-worker:dev and the variants
#                a2a-echo-worker:grow are already on the nodes
# --keep         leave the namespace a2a for a look afterwards
# KUBECTL        the kubectl command (default kubectl); DOCKER_HOST the engine images are built on
# Refuses to run where a namespace a2a exists: it would be deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
load="" kubeconfig="" build=1 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --load) load=${2:?--load needs a command}; shift 2 ;;
    --kubeconfig) kubeconfig=${2:?--kubeconfig needs a file}; shift 2 ;;
    --no-build) build=0; shift ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "test-k8s.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
read -r -a kubectl <<<"${KUBECTL:-kubectl}"
[ -n "$kubeconfig" ] && kubectl+=(--kubeconfig "$kubeconfig")
k() { "${kubectl[@]}" "$@"; }
say() { echo "test-k8s: $*"; }

k version >/dev/null 2>&1 || { echo "test-k8s.sh: kubectl cannot reach the cluster (${kubectl[*]} version)" >&2; exit 1; }
if k get namespace a2a >/dev/null 2>&1; then
  echo "test-k8s.sh: namespace a2a exists; this suite deploys there and deletes it at the end: remove it first (kubectl delete namespace a2a)" >&2
  exit 1
fi
if [ "$build" = 1 ] && [ -z "$load" ]; then
  echo "test-k8s.sh: --load CMD is required (how images reach the nodes), or --no-build" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/a2a-k8s.XXXXXX")
cleanup() {
  rc=$?
  if [ "$keep" = 0 ]; then
    say "removing namespace a2a"
    k delete namespace a2a --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT INT TERM

if [ "$build" = 1 ]; then
  say "building images"
  scripts/build-image.sh a2a-worker-controller a2a-worker-controller:dev >/dev/null
  scripts/build-worker-image.sh a2a-echo-worker:dev >/dev/null
  # A worker that takes memory without end 2 s after it is ready (the OOM scenario).
  printf 'FROM a2a-echo-worker:dev\nCMD ["--grow-after=2000"]\n' | docker build -q -t a2a-echo-worker:grow - >/dev/null
  docker save -o "$work/images.tar" a2a-worker-controller:dev a2a-echo-worker:dev a2a-echo-worker:grow
  docker rmi a2a-echo-worker:grow >/dev/null
  say "loading images: $load"
  if [[ "$load" == *"{}"* ]]; then
    sh -c "${load//\{\}/$work/images.tar}"
  else
    sh -c "$load" <"$work/images.tar"
  fi
fi

say "deploying scripts/k8s/ as the README says"
k apply -f scripts/k8s/00-namespace.yaml
k -n a2a create secret generic a2a-worker-controller-auth --from-literal=token="$(openssl rand -hex 32)"
k apply -f scripts/k8s/
k -n a2a rollout status deployment/a2a-worker-controller --timeout=180s

python3 tests/python/k8s_cluster.py --kubectl "${kubectl[*]}"
