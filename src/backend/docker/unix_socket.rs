//! A ureq transport over a Unix domain socket (the Docker Engine's), written here because
//! ureq has none built in. Every URL the agent is given goes to the one socket path; the
//! host part of the URL is ignored. Connections are not pooled (`is_open` is false): a
//! connect on a local socket costs microseconds, and a stale pooled connection would cost a
//! failed engine call.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::backend::api_call::OneAddress;
use ureq::config::Config;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport,
};

/// An agent whose every request goes to the Unix socket at `path`.
pub fn agent(path: PathBuf, config: Config) -> ureq::Agent {
    // No DNS: the socket path is the address (the one answered is never dialled).
    let unused = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    ureq::Agent::with_parts(config, UnixConnector { path }, OneAddress(unused))
}

#[derive(Debug)]
struct UnixConnector {
    path: PathBuf,
}

impl<In: Transport> Connector<In> for UnixConnector {
    type Out = UnixTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<In>,
    ) -> Result<Option<UnixTransport>, ureq::Error> {
        let stream = UnixStream::connect(&self.path)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(UnixTransport {
            stream,
            buffers,
            read_timeout: None,
            write_timeout: None,
        }))
    }
}

#[derive(Debug)]
struct UnixTransport {
    stream: UnixStream,
    buffers: LazyBuffers,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

/// The socket timeout for the next I/O; `None` = no limit (ureq then has none set either).
fn timeout_of(next: &NextTimeout) -> Option<Duration> {
    next.not_zero().map(|d| *d)
}

fn map_io(e: io::Error, next: &NextTimeout) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ureq::Error::Timeout(next.reason),
        _ => ureq::Error::Io(e),
    }
}

impl Transport for UnixTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let next = timeout.for_write();
        let t = timeout_of(&next);
        if t != self.write_timeout {
            self.stream.set_write_timeout(t)?;
            self.write_timeout = t;
        }
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output).map_err(|e| map_io(e, &next))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let next = timeout.for_read();
        let t = timeout_of(&next);
        if t != self.read_timeout {
            self.stream.set_read_timeout(t)?;
            self.read_timeout = t;
        }
        let buf = self.buffers.input_append_buf();
        let n = loop {
            match self.stream.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other.map_err(|e| map_io(e, &next))?,
            }
        };
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        false
    }
}
