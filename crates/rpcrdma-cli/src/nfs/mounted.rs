//! Connecting `rpcrdma nfs` to an export: find MOUNT, MNT the export over
//! TCP, connect NFS over the URL's transport (with the RFC 8267 bindings
//! over RPC-over-RDMA), and ask FSINFO for the preferred transfer sizes.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use nfs3::client::{MountClient, Nfs3Client};
use nfs3::res::Fsinfo3ResOk;
use nfs3::types::{NfsFh3, MAX_IO_SIZE};
use nfs3::{MountBinding, Nfs3Binding};
use oncrpc::Credential;
use oncrpc_tcp::{ClientConfig, TcpChannel};

use super::wire::Wire;
use super::NfsArgs;
use crate::channel::{self, AnyChannel};
use crate::rpcbind::{port_of_universal_address, Rpcbind, RPCBIND_PORT};
use crate::target::{NfsTarget, Target};

/// A mounted export with one or more NFS connections.
pub struct Mounted {
    /// The export, as given.
    pub url: NfsTarget,
    /// The NFS clients, one per connection.
    pub clients: Vec<Arc<Nfs3Client<Wire>>>,
    /// The export's root handle.
    pub root: NfsFh3,
    /// FSINFO of the root.
    pub fsinfo: Fsinfo3ResOk,
    mount: MountClient<TcpChannel>,
    device: Option<iwarp::Device>,
}

/// `HOST:PORT`, with brackets around an IPv6 host.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Where MOUNT v3 over TCP is: `--mount-port`, else rpcbind on HOST,
/// else (tcp:// only) the NFS port.
async fn mount_address(url: &NfsTarget, mount_port: Option<u16>) -> anyhow::Result<String> {
    if let Some(p) = mount_port {
        return Ok(host_port(&url.host, p));
    }
    let netid = if url.host.contains(':') {
        "tcp6"
    } else {
        "tcp"
    };
    let asked = async {
        let rpcbind = Rpcbind::connect(&host_port(&url.host, RPCBIND_PORT)).await?;
        let uaddr = rpcbind
            .getaddr(nfs3::MOUNT_PROGRAM, nfs3::MOUNT_V3, netid)
            .await?
            .context("rpcbind has no MOUNT version 3 over tcp")?;
        port_of_universal_address(&uaddr)
            .with_context(|| format!("rpcbind gave an invalid address {uaddr:?}"))
    };
    match (asked.await, &url.target) {
        (Ok(port), _) => Ok(host_port(&url.host, port)),
        (Err(e), Target::Tcp { .. }) => {
            tracing::info!("rpcbind: {e:#}; trying MOUNT on the NFS port {}", url.port);
            Ok(host_port(&url.host, url.port))
        }
        (Err(e), Target::Rdma { .. }) => Err(e.context(format!(
            "cannot find MOUNT on {} (give --mount-port)",
            url.host
        ))),
    }
}

/// The AUTH_SYS credential of `--uid`/`--gid` or of this process.
fn credential(args: &NfsArgs) -> anyhow::Result<Credential> {
    let uid = args
        .uid
        .unwrap_or_else(|| rustix::process::getuid().as_raw());
    let gid = args
        .gid
        .unwrap_or_else(|| rustix::process::getgid().as_raw());
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    Ok(nfs3::client::auth_sys(uid, gid, vec![], &host)?)
}

impl Mounted {
    /// MNTs the export and opens `connections` NFS connections.
    pub async fn open(args: &NfsArgs, connections: usize) -> anyhow::Result<Mounted> {
        let url = args.url.clone();
        let cred = credential(args)?;
        let mount_addr = mount_address(&url, args.mount_port).await?;
        let tcp = TcpChannel::connect_with(
            mount_addr.as_str(),
            ClientConfig {
                connect_timeout: args.timeout,
                default_timeout: Some(args.timeout),
                ..ClientConfig::default()
            },
        )
        .await
        .with_context(|| format!("cannot connect to MOUNT at tcp://{mount_addr}"))?;
        let mount = MountClient::new(tcp)
            .with_credential(cred.clone())
            .with_timeout(args.timeout);
        let root = mount
            .mnt(&url.export)
            .await
            .with_context(|| format!("cannot mount {} (MOUNT at {mount_addr})", url.export))?
            .fhandle;

        let device = match url.target {
            Target::Rdma { .. } => Some(args.rdma.device_with_handshake(Some(args.timeout))?),
            Target::Tcp { .. } => None,
        };
        let options = channel::ConnectOptions {
            timeout: args.timeout,
            max_fragment: None,
            rdma: args.rdma.config()?,
            device: device.clone(),
        };
        let mut clients = Vec::with_capacity(connections);
        for _ in 0..connections {
            let mut bindings = rpcrdma::Bindings::new();
            bindings.add(Nfs3Binding).add(MountBinding);
            let ch: AnyChannel = channel::connect_with(&url.target, &options, bindings).await?;
            let client = Nfs3Client::new(Wire::new(Arc::new(ch), args.report))
                .with_credential(cred.clone())
                .with_timeout(args.timeout);
            clients.push(Arc::new(client));
        }
        let fsinfo = clients[0]
            .fsinfo(&root)
            .await
            .with_context(|| format!("FSINFO of {url}"))?;
        Ok(Mounted {
            url,
            clients,
            root,
            fsinfo,
            mount,
            device,
        })
    }

    /// The first connection's client.
    pub fn nfs(&self) -> &Arc<Nfs3Client<Wire>> {
        &self.clients[0]
    }

    /// Preferred READ size (FSINFO `rtpref`, within 4 KiB ..= rtmax, 1 MiB).
    pub fn read_size(&self) -> u32 {
        let max = self.fsinfo.rtmax.clamp(4096, MAX_IO_SIZE);
        self.fsinfo.rtpref.clamp(4096, max)
    }

    /// Preferred WRITE size (FSINFO `wtpref`, within 4 KiB ..= wtmax, 1 MiB).
    pub fn write_size(&self) -> u32 {
        let max = self.fsinfo.wtmax.clamp(4096, MAX_IO_SIZE);
        self.fsinfo.wtpref.clamp(4096, max)
    }

    /// Largest READ and WRITE (`rtmax`, `wtmax`, at most 1 MiB).
    pub fn max_io(&self) -> (u32, u32) {
        (
            self.fsinfo.rtmax.min(MAX_IO_SIZE),
            self.fsinfo.wtmax.min(MAX_IO_SIZE),
        )
    }

    /// UMNTs (advisory; failures are ignored) and disconnects.
    pub async fn close(self) {
        let _ =
            tokio::time::timeout(Duration::from_secs(2), self.mount.umnt(&self.url.export)).await;
        for c in &self.clients {
            c.channel().inner().close();
        }
        if let Some(dev) = &self.device {
            if let Err(e) = dev.flush_capture() {
                eprintln!("rpcrdma: warning: cannot write the capture file: {e}");
            }
        }
    }
}
