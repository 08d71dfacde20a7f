//! The Kubernetes backend (k3s or any conformant cluster): one pod per task, owned by its
//! labels. Being built in steps (issue 8): so far the worker pod (`pod`) and the API client
//! (`api`: TLS with the cluster CA, rotating bearer tokens or a client certificate, `Status`
//! errors); the `Backend` implementation comes next, and until it does `build_backend`
//! refuses `BACKEND=k8s` with one clear line.

pub(crate) mod api;
pub(crate) mod pod;
