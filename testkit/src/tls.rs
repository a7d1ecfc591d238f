//! Throwaway certificates for TLS tests, made by the `openssl` command line: a CA, a
//! server certificate it signed for `localhost` and `127.0.0.1`, a client certificate it
//! signed (mutual TLS), and a second CA that signed nothing (an untrusted authority).
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// PEM files in a temp dir of their own, removed on drop.
pub struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    /// Makes every file, or returns `None` after a loud message when `openssl` is not on
    /// PATH, unless `STAMPEDE_REQUIRE_REDIS=1` (then it panics).
    pub fn generate() -> Option<Self> {
        if !openssl_installed() {
            return None;
        }
        let dir = tempfile::tempdir().expect("a temp dir for certificates");
        let certificates = Certificates { dir };
        certificates.authority("ca", "stampede test CA");
        certificates.authority("other-ca", "an authority nobody trusts");
        certificates.signed(
            "server",
            "localhost",
            Some("subjectAltName=DNS:localhost,IP:127.0.0.1"),
        );
        certificates.signed(
            "client",
            "stampede test client",
            Some("extendedKeyUsage=clientAuth"),
        );
        Some(certificates)
    }

    /// The CA that signed the server's and the client's certificates.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// A CA that signed neither.
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.pem")
    }

    /// The server's certificate and key.
    pub fn server(&self) -> (PathBuf, PathBuf) {
        (self.path("server.pem"), self.path("server-key.pem"))
    }

    /// The client's certificate and key, for mutual TLS.
    pub fn client(&self) -> (PathBuf, PathBuf) {
        (self.path("client.pem"), self.path("client-key.pem"))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn authority(&self, name: &str, subject: &str) {
        openssl(
            self.dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-keyout",
                &format!("{name}-key.pem"),
                "-out",
                &format!("{name}.pem"),
                "-subj",
                &format!("/CN={subject}"),
            ],
        );
    }

    fn signed(&self, name: &str, subject: &str, extension: Option<&str>) {
        let dir = self.dir.path();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}-key.pem"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={subject}"),
            ],
        );
        let mut args = vec![
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        if let Some(extension) = extension {
            std::fs::write(dir.join(format!("{name}.ext")), format!("{extension}\n"))
                .expect("the extension file");
            args.extend(["-extfile".to_owned(), format!("{name}.ext")]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        openssl(dir, &args);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success(), "openssl {} failed", args.join(" "));
}

fn openssl_installed() -> bool {
    let found = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if found {
        return true;
    }
    if std::env::var(crate::REQUIRE_REDIS_VAR).as_deref() == Ok("1") {
        panic!(
            "openssl is not on PATH and {}=1: install it (`sudo apt-get install -y openssl`)",
            crate::REQUIRE_REDIS_VAR
        );
    }
    eprintln!("\n*** SKIPPED: openssl is not on PATH, so this TLS test did not run. ***\n");
    false
}
