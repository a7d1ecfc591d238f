//! How a replica reaches Redis: where (one server, a cluster's seed nodes, or the master
//! a set of Sentinels names), as whom (an ACL user and its password), over what (TLS,
//! trusting the platform's roots or a private CA, with a client certificate for mutual
//! TLS) and under what name.
//!
//! [`Access::from_settings`] reads and checks all of it: URLs parsed by the client's own
//! parser, files read, PEM parsed, TLS asked of a build that has it. The runtime's build
//! calls it, so a setting this build cannot use is refused at start-up with the key at
//! fault, instead of a runtime that starts healthy and shares nothing; the store calls it
//! again when it connects.
use crate::config::{redacted, BackendSettings, Secret};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult};
#[cfg(feature = "tls")]
use redis::{ClientTlsConfig, TlsCertificates};
use std::path::Path;

/// Where the shared store lives, parsed.
#[derive(Clone)]
pub(crate) enum Target {
    /// One Redis server.
    Node(ConnectionInfo),
    /// A Redis Cluster, by any of its masters (the client discovers the rest).
    Cluster(Vec<ConnectionInfo>),
    /// The master a set of Sentinels names, followed through failovers.
    Sentinel(Sentinels),
    /// The simulated server of a simulation of the fleet (`model://<world>/<replica>`),
    /// and the replica's label there.
    #[cfg(feature = "simulation")]
    Model(std::sync::Arc<crate::shared::model::network::World>, String),
}

/// `redis+sentinel://[user:password@]host:port[,host:port…]/<master>[/<db>]`, parsed.
#[derive(Clone)]
pub(crate) struct Sentinels {
    /// Each Sentinel, as a connection (its own credentials, no database).
    pub(crate) nodes: Vec<ConnectionInfo>,
    /// The name the Sentinels know the master by.
    pub(crate) master: String,
    /// Whether the master (and the Sentinels) speak TLS.
    tls: bool,
    db: i64,
}

/// Everything a replica needs to open its connections.
#[derive(Clone)]
pub(crate) struct Access {
    pub(crate) target: Target,
    /// The data nodes' ACL user and password, over the URL's own when set.
    username: Option<String>,
    password: Option<Secret>,
    sentinel_username: Option<String>,
    sentinel_password: Option<Secret>,
    tls: Tls,
    /// The base of `CLIENT SETNAME`.
    pub(crate) client_name: String,
}

#[derive(Clone, Default)]
struct Tls {
    #[cfg(feature = "tls")]
    certificates: Option<TlsCertificates>,
    /// No certificate is checked (a URL's `#insecure`, or `tls_insecure`).
    insecure: bool,
}

/// A setting refused: its key and why.
pub(crate) type Refused = (&'static str, String);

impl Access {
    /// One Redis server at `url` with no settings beyond it.
    #[cfg(test)]
    pub(crate) fn node(url: &str) -> RedisResult<Self> {
        Ok(Self::over(Target::Node(url.into_connection_info()?)))
    }

    /// A Redis Cluster reached through `nodes`.
    #[cfg(test)]
    pub(crate) fn cluster(nodes: &[String]) -> RedisResult<Self> {
        let nodes = nodes
            .iter()
            .map(|node| node.as_str().into_connection_info());
        Ok(Self::over(Target::Cluster(
            nodes.collect::<RedisResult<_>>()?,
        )))
    }

    fn over(target: Target) -> Self {
        Access {
            target,
            username: None,
            password: None,
            sentinel_username: None,
            sentinel_password: None,
            tls: Tls::default(),
            client_name: "stampede".into(),
        }
    }

    /// Reads and checks the shared store's settings; the key at fault when one cannot be
    /// used by this build.
    pub(crate) fn from_settings(settings: &BackendSettings) -> Result<Self, Refused> {
        let mut url_credentials = None;
        let target = match (&settings.url, settings.nodes.as_slice()) {
            (Some(url), []) if is_sentinel(url.expose()) => {
                let (sentinels, credentials) =
                    parse_sentinels(url.expose()).map_err(|why| ("url", why))?;
                url_credentials = credentials;
                Target::Sentinel(sentinels)
            }
            #[cfg(feature = "simulation")]
            (Some(url), []) if url.expose().starts_with("model://") => {
                let path = &url.expose()["model://".len()..];
                let (name, replica) = path.split_once('/').unwrap_or((path, ""));
                let world = crate::shared::model::network::World::named(name).ok_or_else(|| {
                    (
                        "url",
                        format!("no simulated server named `{name}` on this thread"),
                    )
                })?;
                Target::Model(world, replica.to_owned())
            }
            (Some(url), []) => Target::Node(parsed("url", url.expose())?),
            (None, nodes @ [_, ..]) => Target::Cluster(
                (nodes.iter())
                    .map(|node| parsed("nodes", node.expose()))
                    .collect::<Result<_, _>>()?,
            ),
            _ => {
                return Err((
                    "url",
                    "a shared store needs one Redis `url` or a list of cluster `nodes`".into(),
                ))
            }
        };
        let mut access = Self::over(target);
        access.client_name = settings.client_name.clone();
        let (url_username, url_password) = url_credentials.unzip();
        access.username = settings.username.clone().or(url_username.flatten());
        access.password = match (&settings.password, &settings.password_file) {
            (Some(_), Some(_)) => {
                return Err((
                    "password_file",
                    "give `password` or `password_file`, not both".into(),
                ))
            }
            (Some(password), None) => Some(password.clone()),
            (None, Some(path)) => Some(read_password(path)?),
            (None, None) => url_password,
        };
        access.sentinel_username = settings.sentinel_username.clone();
        access.sentinel_password = settings.sentinel_password.clone();
        access.tls = tls(settings, access.uses_tls())?;
        Ok(access)
    }

    /// Whether the URLs ask for TLS (`rediss://`).
    fn uses_tls(&self) -> bool {
        let tls = |info: &ConnectionInfo| matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        match &self.target {
            Target::Node(info) => tls(info),
            Target::Cluster(nodes) => nodes.iter().any(tls),
            Target::Sentinel(sentinels) => sentinels.tls,
            #[cfg(feature = "simulation")]
            Target::Model(..) => false,
        }
    }

    /// Whether no certificate is checked; the store warns of it when it connects.
    pub(crate) fn insecure(&self) -> bool {
        let insecure = |info: &ConnectionInfo| {
            matches!(info.addr(), ConnectionAddr::TcpTls { insecure: true, .. })
        };
        self.tls.insecure
            || match &self.target {
                Target::Node(info) => insecure(info),
                Target::Cluster(nodes) => nodes.iter().any(insecure),
                _ => false,
            }
    }

    /// Where this connects, for a log line: host and port, never credentials.
    pub(crate) fn describe(&self) -> String {
        match &self.target {
            Target::Node(info) => info.addr().to_string(),
            Target::Cluster(nodes) => {
                let nodes: Vec<_> = nodes.iter().map(|node| node.addr().to_string()).collect();
                format!("cluster [{}]", nodes.join(", "))
            }
            Target::Sentinel(sentinels) => {
                let nodes: Vec<_> = (sentinels.nodes.iter())
                    .map(|n| n.addr().to_string())
                    .collect();
                format!(
                    "master `{}` of sentinels [{}]",
                    sentinels.master,
                    nodes.join(", ")
                )
            }
            #[cfg(feature = "simulation")]
            Target::Model(..) => "the simulated server".to_owned(),
        }
    }

    /// A client for the data node `info`: this access's credentials, TLS and name.
    pub(crate) fn client(&self, info: &ConnectionInfo) -> RedisResult<Client> {
        let info = self.credentials(info.clone(), &self.username, &self.password);
        self.tls_client(info)
    }

    /// A client for the data node at `host:port` (a master a Sentinel named).
    pub(crate) fn client_at(&self, host: &str, port: u16) -> RedisResult<Client> {
        let Target::Sentinel(sentinels) = &self.target else {
            unreachable!("only the Sentinels name a master by its address")
        };
        let addr = match sentinels.tls {
            true => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: self.tls.insecure,
                tls_params: None,
            },
            false => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        let info = addr.into_connection_info()?;
        let settings = info.redis_settings().clone().set_db(sentinels.db);
        self.client(&info.set_redis_settings(settings))
    }

    /// A client for one of the Sentinels.
    pub(crate) fn sentinel_client(&self, info: &ConnectionInfo) -> RedisResult<Client> {
        let info = self.credentials(
            info.clone(),
            &self.sentinel_username,
            &self.sentinel_password,
        );
        self.tls_client(info)
    }

    /// The cluster's client, with this access's credentials and TLS.
    pub(crate) fn cluster_client(&self, nodes: &[ConnectionInfo]) -> ClusterClientBuilder {
        let nodes = nodes
            .iter()
            .map(|node| self.credentials(node.clone(), &self.username, &self.password));
        let builder = ClusterClient::builder(nodes.collect::<Vec<_>>());
        #[cfg(feature = "tls")]
        let builder = match (&self.tls.certificates, self.tls.insecure) {
            (_, true) => builder.tls(redis::TlsMode::Insecure),
            (Some(certificates), false) => builder.certs(certificates.clone()),
            (None, false) => builder,
        };
        builder
    }

    /// `info` with `username` and `password` over its own, and the library's name, which
    /// the client sends on every (re)connection and `CLIENT LIST` shows as `lib-name`.
    fn credentials(
        &self,
        info: ConnectionInfo,
        username: &Option<String>,
        password: &Option<Secret>,
    ) -> ConnectionInfo {
        let mut settings = info.redis_settings().clone();
        if let Some(username) = username {
            settings = settings.set_username(username);
        }
        if let Some(password) = password {
            settings = settings.set_password(password.expose());
        }
        let settings = settings.set_lib_name("stampede", env!("CARGO_PKG_VERSION"));
        let info = info.set_redis_settings(settings);
        match (info.addr(), self.tls.insecure) {
            (ConnectionAddr::TcpTls { host, port, .. }, true) => {
                let addr = ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: true,
                    tls_params: None,
                };
                info.set_addr(addr)
            }
            _ => info,
        }
    }

    fn tls_client(&self, info: ConnectionInfo) -> RedisResult<Client> {
        #[cfg(feature = "tls")]
        if let (ConnectionAddr::TcpTls { .. }, Some(certificates)) =
            (info.addr(), &self.tls.certificates)
        {
            return Client::build_with_tls(info, certificates.clone());
        }
        Client::open(info)
    }
}

/// `url` parsed by the client, or why not, blamed on `key`.
fn parsed(key: &'static str, url: &str) -> Result<ConnectionInfo, Refused> {
    if url.starts_with("rediss://") && !cfg!(feature = "tls") {
        return Err((key, format!("`{}` asks for TLS, which this build of stampede leaves out: enable its `tls` feature (on by default)", redacted(url))));
    }
    url.into_connection_info().map_err(|error| {
        (key, format!("`{}` is not a Redis URL this build can use ({error}); expected redis://host:port/db, rediss://… for TLS, or redis+sentinel://host:port,…/master", redacted(url)))
    })
}

fn is_sentinel(url: &str) -> bool {
    url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://")
}

/// The user and password a URL names.
type Credentials = (Option<String>, Secret);

/// `redis+sentinel://[user:password@]host:port[,host:port…]/<master>[/<db>]`, and the
/// user and password it names: the data nodes' (the Sentinels' are settings of their
/// own).
///
/// Longer than a screen: the URL's parts are checked in the order they are written, each
/// with the error that names it.
fn parse_sentinels(url: &str) -> Result<(Sentinels, Option<Credentials>), String> {
    let shown = redacted(url);
    let (scheme, rest) = url.split_once("://").unwrap_or((url, ""));
    let tls = scheme == "rediss+sentinel";
    if tls && !cfg!(feature = "tls") {
        return Err(format!("`{shown}` asks for TLS, which this build of stampede leaves out: enable its `tls` feature (on by default)"));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user_info, hosts) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let expected =
        "expected redis+sentinel://[user:password@]host:port[,host:port…]/<master name>[/<db>]";
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let master = segments
        .next()
        .map(percent_decoded)
        .ok_or_else(|| format!("`{shown}` names no master; {expected}"))?;
    let db = match segments.next() {
        None => 0,
        Some(db) => db
            .parse::<i64>()
            .map_err(|_| format!("`{shown}`: `{db}` is not a database number; {expected}"))?,
    };
    if segments.next().is_some() || path.contains(['?', '#']) {
        return Err(format!(
            "`{shown}` has more than a master and a database; {expected}"
        ));
    }
    let sentinel_scheme = if tls { "rediss" } else { "redis" };
    let nodes = (hosts.split(','))
        .map(|host| {
            let host = host.trim();
            if host.is_empty() {
                return Err(format!("`{shown}` lists an empty Sentinel; {expected}"));
            }
            let port = if host
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                ""
            } else {
                ":26379"
            };
            format!("{sentinel_scheme}://{host}{port}")
                .as_str()
                .into_connection_info()
                .map_err(|error| format!("`{shown}`: Sentinel `{host}` ({error}); {expected}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let credentials = user_info.map(|user_info| {
        let (user, password) = user_info.split_once(':').unwrap_or(("", user_info));
        let user = Some(percent_decoded(user)).filter(|user| !user.is_empty());
        (user, Secret::new(percent_decoded(password)))
    });
    Ok((
        Sentinels {
            nodes,
            master,
            tls,
            db,
        },
        credentials,
    ))
}

/// `%XX` escapes decoded (a URL's user, password and names); anything else kept.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[at],
            bytes.get(at + 1).copied().and_then(hex),
            bytes.get(at + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                at += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The password in the file at `path`, without its trailing newline.
fn read_password(path: &Path) -> Result<Secret, Refused> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        (
            "password_file",
            format!("cannot read `{}`: {error}", path.display()),
        )
    })?;
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    match password.is_empty() {
        true => Err(("password_file", format!("`{}` is empty", path.display()))),
        false => Ok(Secret::new(password)),
    }
}

/// Makes ring rustls's provider for this process unless the program chose one: with
/// more than one provider compiled in (another crate's choice), rustls could not pick.
pub(crate) fn prepare_tls() {
    #[cfg(feature = "tls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one meanwhile: theirs stays, which is as good. ring,
        // not aws-lc-rs: no cmake or C++ toolchain on the user's machine, a quarter of the
        // build; ring's provider is deprecated for lacking post-quantum key exchange,
        // which the managed Redis services do not offer either.
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(not(feature = "tls"))]
fn tls(settings: &BackendSettings, _uses_tls: bool) -> Result<Tls, Refused> {
    let asked = [
        ("tls_ca_file", settings.tls_ca_file.is_some()),
        ("tls_ca_pem", settings.tls_ca_pem.is_some()),
        ("tls_cert_file", settings.tls_cert_file.is_some()),
        ("tls_key_file", settings.tls_key_file.is_some()),
        ("tls_insecure", settings.tls_insecure),
    ];
    match asked.into_iter().find(|(_, set)| *set) {
        Some((key, _)) => Err((key, "TLS settings need stampede's `tls` feature (on by default), which this build leaves out".into())),
        None => Ok(Tls::default()),
    }
}

/// Longer than a screen: each TLS setting (CA, client certificate and key, server name) is
/// read and checked where it is used, each with its own error.
#[cfg(feature = "tls")]
fn tls(settings: &BackendSettings, uses_tls: bool) -> Result<Tls, Refused> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let read = |key: &'static str, path: &Path| {
        std::fs::read(path)
            .map_err(|error| (key, format!("cannot read `{}`: {error}", path.display())))
    };
    let certificates = |key: &'static str, pem: &[u8], what: &str| {
        let parsed: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
        match parsed {
            Ok(certificates) if !certificates.is_empty() => Ok(()),
            Ok(_) => Err((key, format!("holds no PEM certificate ({what})"))),
            Err(error) => Err((key, format!("is not PEM certificates ({what}): {error}"))),
        }
    };
    let root_cert = match (&settings.tls_ca_file, &settings.tls_ca_pem) {
        (Some(_), Some(_)) => {
            return Err((
                "tls_ca_pem",
                "give `tls_ca_file` or `tls_ca_pem`, not both".into(),
            ))
        }
        (Some(path), None) => {
            let pem = read("tls_ca_file", path)?;
            certificates("tls_ca_file", &pem, "the certificate authorities to trust")
                .map_err(|(key, why)| (key, format!("`{}` {why}", path.display())))?;
            Some(pem)
        }
        (None, Some(pem)) => {
            certificates(
                "tls_ca_pem",
                pem.as_bytes(),
                "the certificate authorities to trust",
            )
            .map_err(|(key, why)| (key, format!("the text {why}")))?;
            Some(pem.clone().into_bytes())
        }
        (None, None) => None,
    };
    let client_tls = match (&settings.tls_cert_file, &settings.tls_key_file) {
        (Some(cert), Some(key)) => {
            let client_cert = read("tls_cert_file", cert)?;
            certificates("tls_cert_file", &client_cert, "this client's certificate")
                .map_err(|(k, why)| (k, format!("`{}` {why}", cert.display())))?;
            let client_key = read("tls_key_file", key)?;
            PrivateKeyDer::from_pem_slice(&client_key).map_err(|error| {
                (
                    "tls_key_file",
                    format!("`{}` is not a PEM private key: {error}", key.display()),
                )
            })?;
            Some(ClientTlsConfig {
                client_cert,
                client_key,
            })
        }
        (Some(_), None) => {
            return Err((
                "tls_key_file",
                "mutual TLS needs the key of `tls_cert_file` too".into(),
            ))
        }
        (None, Some(_)) => {
            return Err((
                "tls_cert_file",
                "mutual TLS needs the certificate of `tls_key_file` too".into(),
            ))
        }
        (None, None) => None,
    };
    let asked = [
        ("tls_ca_file", settings.tls_ca_file.is_some()),
        ("tls_ca_pem", settings.tls_ca_pem.is_some()),
        ("tls_cert_file", settings.tls_cert_file.is_some()),
        ("tls_insecure", settings.tls_insecure),
    ];
    if let Some((key, _)) = asked.into_iter().find(|(_, set)| *set && !uses_tls) {
        return Err((key, "is set, but the Redis URL does not ask for TLS: write `rediss://` (or `rediss+sentinel://`)".into()));
    }
    let certificates = (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
        client_tls,
        root_cert,
    });
    Ok(Tls {
        certificates,
        insecure: settings.tls_insecure,
    })
}

#[cfg(test)]
mod tests;
