HTTP/1.1 201
Audit-Id: fbc2067a-f4db-45e0-96fd-624282c17a43
Cache-Control: no-cache, private
Content-Type: application/json
Warning: 299 - "would violate PodSecurity \"restricted:latest\": runAsNonRoot != true (pod and container \"copy\" must not set securityContext.runAsNonRoot=false), runAsUser=0 (pod must not set runAsUser=0)"
X-Kubernetes-Pf-Flowschema-Uid: d053dbcc-08cb-4b36-8ff0-7eb9107100b3
X-Kubernetes-Pf-Prioritylevel-Uid: 7b467ceb-58d3-4cee-a677-6fcf2b45c748
Date: Sun, 06 Dec 2026 15:34:16 GMT
Connection: close
Transfer-Encoding: chunked
