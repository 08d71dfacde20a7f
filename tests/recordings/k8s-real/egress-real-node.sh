#!/bin/bash
# Inside the real node's network namespace: what the bridge CNI does with the egress fence.
set -uo pipefail
K="/tmp/realk8s/bin126/kubectl --kubeconfig /tmp/realk8s/node/cp/admin.kubeconfig"
REPO=/work/main
W=/tmp/realk8s/node-egress
API=$(cat /tmp/realk8s/node/cp/READY)
P=/tmp/realk8s/node/cp/pki
say() { echo "$*"; }
say "# a real node (kubelet 1.36.2, containerd 1.6, the bridge CNI, kube-proxy), $(date -u '+%F %T') UTC"
for f in 00-namespace 10-serviceaccount 20-role 30-rolebinding 40-worker-service 60-networkpolicy 70-egress; do
  say "\$ kubectl apply -f scripts/k8s/$f.yaml"; $K apply -f $REPO/scripts/k8s/$f.yaml 2>&1 | sed 's/^/  /'
done
say '$ kubectl -n default run dest --image=localhost/tinyhttp:dev --image-pull-policy=Never   # a destination outside the fence'
$K -n default run dest --image=localhost/tinyhttp:dev --image-pull-policy=Never 2>&1 | sed 's/^/  /'
$K -n default wait --for=condition=Ready pod/dest --timeout=60s >/dev/null
DEST=$($K -n default get pod dest -o jsonpath='{.status.podIP}')
say "  dest's pod IP: $DEST"
echo '{"templates": {"coder": {"egress": ["api.github.com:443"]}}}' > $W/templates.json
A2A_AUTH_TOKEN=realnode-egress-token-0123456789 /work/main/target/release/a2a-worker-controller \
  -listen=127.0.0.1:18090 -a2a-public-url=http://127.0.0.1:18090 -backend=k8s -k8s-api-url=$API \
  -k8s-ca-file=$P/ca.crt -k8s-client-cert-file=$P/admin.crt -k8s-client-key-file=$P/admin.key \
  -k8s-namespace=a2a -worker-image=a2a-echo-worker:dev -controller-id=realnode-egress \
  -worker-templates-file=$W/templates.json -egress-proxy-url=http://a2a-egress.a2a.svc.cluster.local:8790 \
  > $W/controller.log 2>&1 &
CPID=$!
for i in $(seq 50); do curl -fs http://127.0.0.1:18090/healthz >/dev/null && break; sleep 0.2; done
say '$ create (template coder: egress ["api.github.com:443"])'
curl -s http://127.0.0.1:18090/a2a -H "Authorization: Bearer realnode-egress-token-0123456789" -H 'content-type: application/json' \
  -d '{"jsonrpc":"2.0","id":"1","method":"SendMessage","params":{"message":{"messageId":"1","role":"ROLE_USER","parts":[{"data":{"operation":"create","task":"fenced on a real node","template":"coder"}}]}}}' > $W/create.json
python3 - $W/create.json <<'PY'
import json,sys
t=json.load(open(sys.argv[1]))["result"]["task"]
d=[p for p in t.get("artifacts",[{}])[0].get("parts",[]) if "data" in p]
print("  ", t["status"]["state"], (d[0]["data"]["worker"]["worker_id"] if d else t["status"]))
open(sys.argv[1]+".token","w").write(d[0]["data"]["token"] if d else "")
PY
POD=$($K -n a2a get pods -l a2a-worker-controller/owner=realnode-egress -o jsonpath='{.items[0].metadata.name}')
IP=$($K -n a2a get pod $POD -o jsonpath='{.status.podIP}')
say "  pod $POD at $IP, label egress=$($K -n a2a get pod $POD -o jsonpath='{.metadata.labels.a2a-worker-controller/egress}')"
say "  selected by the NetworkPolicy a2a-egress: $($K -n a2a get networkpolicy a2a-egress -o jsonpath='{.spec.podSelector.matchLabels}') policyTypes $($K -n a2a get networkpolicy a2a-egress -o jsonpath='{.spec.policyTypes}')"
TOKEN=$(cat $W/create.json.token)
say "\$ (the fenced worker) net connect $DEST:8080"
curl -s http://$IP:9090/ -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -d "{\"jsonrpc\":\"2.0\",\"id\":\"2\",\"method\":\"SendMessage\",\"params\":{\"message\":{\"messageId\":\"2\",\"role\":\"ROLE_USER\",\"parts\":[{\"text\":\"net connect $DEST:8080\"}]}}}" \
  | python3 -c "import json,sys;print('  ', json.load(sys.stdin)['result']['task']['artifacts'][0]['parts'][0]['text'])"
say "  (the bridge CNI does not enforce NetworkPolicy: the fence needs a CNI that does — k3s's, Calico, Cilium)"
say '$ kubectl -n a2a get pods -l app.kubernetes.io/name=a2a-egress   # the proxy Deployment (its image is not on this node)'
$K -n a2a get pods -l app.kubernetes.io/name=a2a-egress 2>&1 | sed 's/^/  /'
kill $CPID; wait $CPID 2>/dev/null
$K delete namespace a2a --wait=false >/dev/null 2>&1; $K -n default delete pod dest --wait=false >/dev/null 2>&1
