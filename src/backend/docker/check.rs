//! What the Docker backend validates: a template without the engine (it needs an image),
//! and with it — the image is present (creates never pull), a pooled template's image says it
//! speaks the activation contract — for `check`, and that last at startup.

use super::{engine_error, DockerBackend};
use crate::backend::{Backend, Check, Finding, Refusal, Template};

/// Validation's first step: a docker template needs an image.
pub(super) fn template_refusal(t: &Template) -> Result<(), Refusal> {
    if t.image.is_empty() {
        return Err(Refusal::new(
            "image",
            "a docker template needs an image (or WORKER_IMAGE)",
        ));
    }
    Ok(())
}

/// A fenced template needs the proxy's URL (`EGRESS_PROXY_URL`) and joins `EGRESS_NETWORK`
/// alone (no network of its own).
pub(super) fn fence_settings_refusal(t: &Template, proxy_set: bool) -> Result<(), Refusal> {
    crate::backend::validation::fence_refusal(t, proxy_set)?;
    if t.egress.fenced() && t.network.is_some() {
        return Err(Refusal::new(
            "network",
            "a fenced template (egress not \"open\") joins EGRESS_NETWORK alone: it cannot name a network of its own",
        ));
    }
    Ok(())
}

impl DockerBackend {
    /// What stops startup for template `t`: a fence or a runtime this engine cannot give, a
    /// pooled image that does not speak the activation contract. An engine that cannot be
    /// asked now says nothing here (`check` and `/readiness` do).
    fn startup_refusals(&self, t: &Template) -> Vec<Finding> {
        [
            self.fence_refusal(t).ok().flatten(),
            self.runtime_refusal(t).ok().flatten(),
            self.pool_image_refusal(t).ok().flatten(),
        ]
        .into_iter()
        .flatten()
        .map(Finding::failed)
        .collect()
    }

    /// Validation's second step ([`Check`]).
    pub(super) fn findings(&self, asked: Check<'_>) -> Vec<Finding> {
        match asked {
            Check::Engine => {
                let health = Finding::of_health(Backend::health(self));
                let copies = health.ok.then(|| self.copy_image_finding()).flatten();
                std::iter::once(health).chain(copies).collect()
            }
            Check::Template(t) => vec![self.template_finding(t)],
            // An image present that does not say it speaks the activation contract stops
            // startup for a pooled template (one not there yet is `check`'s to say).
            Check::Startup(t) => self.startup_refusals(t),
        }
    }

    /// `WORKSPACE_COPY_IMAGE`, when set, is on the engine (a copy never pulls it).
    fn copy_image_finding(&self) -> Option<Finding> {
        let image = self.container.copy_image.as_deref()?;
        Some(match self.engine.image_present(image) {
            Ok(true) => Finding::ok(format!(
                "workspace copies: WORKSPACE_COPY_IMAGE {image} is present"
            )),
            Ok(false) => Finding::failed(format!(
                "WORKSPACE_COPY_IMAGE {image} is not on the engine: every workspace copy would fail (build it with scripts/build-image.sh a2a-worker-controller {image})"
            )),
            Err(e) => Finding::failed(format!(
                "WORKSPACE_COPY_IMAGE {image} could not be looked up: {}",
                engine_error(e)
            )),
        })
    }

    /// The image is on the engine (creates never pull: a missing image fails every create).
    fn template_finding(&self, t: &Template) -> Finding {
        if let Err(refusal) = template_refusal(t) {
            return Finding::failed(refusal);
        }
        let limits = limits_text(t);
        for refusal in [self.fence_refusal(t), self.runtime_refusal(t)] {
            match refusal {
                Ok(Some(why)) => return Finding::failed(why),
                Err(e) => return Finding::failed(format!("the engine could not be asked: {e}")),
                Ok(None) => {}
            }
        }
        match self.pool_image_refusal(t) {
            Ok(Some(why)) => return Finding::failed(why),
            Err(e) => {
                return Finding::failed(format!("image {} could not be looked up: {e}", t.image))
            }
            Ok(None) => {}
        }
        let pool = match t.pool.is_kept() {
            false => String::new(),
            true => format!(", speaks the activation contract, pool of {}", t.pool),
        };
        let fence = match &t.egress {
            e if e.fenced() => format!(
                ", egress {} through the proxy on internal network {}",
                e.describe(),
                self.docker.egress_network
            ),
            _ => String::new(),
        };
        let runtime = t
            .runtime
            .as_ref()
            .map_or(String::new(), |r| format!(", runtime {r}"));
        match self.engine.image_present(&t.image) {
            Ok(true) => Finding::ok(format!(
                "image {} is present{limits}{pool}{fence}{runtime}",
                t.image
            )),
            Ok(false) => Finding::failed(format!(
                "image {} is not on the engine: creates do not pull; `docker pull {}` (or build it) first",
                t.image, t.image
            )),
            Err(e) => Finding::failed(format!(
                "image {} could not be looked up: {}",
                t.image,
                engine_error(e)
            )),
        }
    }
}
/// `, memory 512 MiB, 1.5 CPUs, 64 pids` (what is set), for `check`.
fn limits_text(t: &Template) -> String {
    let mut parts = Vec::new();
    if let Some(m) = t.memory_bytes {
        parts.push(format!("memory {} MiB", m >> 20));
    }
    if let Some(c) = t.nano_cpus {
        parts.push(format!("{} CPUs", c as f64 / 1e9));
    }
    if let Some(p) = t.pids_limit {
        parts.push(format!("{p} pids"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}
