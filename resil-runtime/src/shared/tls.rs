//! TLS to Redis (feature `redis-tls`): rustls with ring, the CA file, the client certificate
//! for mutual TLS, read and checked when the store is made, so that a missing or broken file
//! is an error at once rather than a handshake that fails forever.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::SharedError;

/// What a builder was told about TLS.
#[derive(Debug, Default, Clone)]
pub(super) struct Tls {
    pub(super) ca: Option<PathBuf>,
    pub(super) client: Option<(PathBuf, PathBuf)>,
    pub(super) insecure: bool,
}

impl Tls {
    /// Whether anything asks for TLS beyond the URL's `rediss://`.
    pub(super) fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some() || self.insecure
    }

    /// The certificates the files hold, for redis-rs, checked: `None` when neither a CA nor a
    /// client certificate was given (the system's roots then verify the server).
    pub(super) fn certificates(&self) -> Result<Option<redis::TlsCertificates>, SharedError> {
        if self.ca.is_none() && self.client.is_none() {
            return Ok(None);
        }
        let root_cert = match &self.ca {
            Some(path) => Some(certificates(path, "ca_file")?),
            None => None,
        };
        let client_tls = match &self.client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: certificates(cert, "client_cert")?,
                client_key: private_key(key)?,
            }),
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

/// Makes ring the process's rustls provider, unless one is installed already (the user's
/// stays): redis-rs builds its TLS settings with the process's provider.
pub(super) fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The most a CA, certificate or key file may hold: a system's whole CA bundle is ~250 KB.
const MAX_PEM_BYTES: u64 = 16 << 20;

/// The file's bytes, read only from a regular file of at most [`MAX_PEM_BYTES`]: a path to a
/// device (`/dev/zero`) would read forever, or until memory ran out, and opening a FIFO for
/// reading waits for a writer that may never come. So the path is looked at before it is
/// opened, opened without waiting (a FIFO put there meanwhile opens at once, and is refused
/// by the second look), and read only if it is a regular file.
fn read(path: &Path, what: &str) -> Result<Vec<u8>, SharedError> {
    use std::io::Read;
    let refused = |reason: String| {
        refused(
            path,
            format!("{what}: {reason}: give the path of a PEM file this process can read"),
        )
    };
    let regular = |metadata: std::io::Result<std::fs::Metadata>| match metadata {
        Ok(metadata) if metadata.is_file() => Ok(()),
        Ok(_) => Err(refused("not a regular file".to_owned())),
        Err(error) => Err(refused(error.to_string())),
    };
    regular(std::fs::metadata(path))?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options
        .open(path)
        .map_err(|error| refused(error.to_string()))?;
    regular(file.metadata())?;
    let mut pem = Vec::new();
    (file.take(MAX_PEM_BYTES + 1))
        .read_to_end(&mut pem)
        .map_err(|error| refused(error.to_string()))?;
    if pem.len() as u64 > MAX_PEM_BYTES {
        return Err(refused(format!("larger than {MAX_PEM_BYTES} bytes")));
    }
    Ok(pem)
}

/// A PEM file's certificates, at least one, each as a trust anchor would take it.
fn certificates(path: &Path, what: &str) -> Result<Vec<u8>, SharedError> {
    let pem = read(path, what)?;
    let refused = |reason: String| refused(path, format!("{what}: {reason}"));
    let mut found = 0;
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate = certificate.map_err(|error| {
            refused(format!(
                "{error}: the file must hold PEM certificates (-----BEGIN CERTIFICATE-----)"
            ))
        })?;
        if what == "ca_file" {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(certificate).map_err(|error| {
                refused(format!("{error}: not a certificate a CA can be trusted by"))
            })?;
        }
        found += 1;
    }
    if found == 0 {
        return Err(refused(
            "no certificate in it: the file must hold PEM certificates (-----BEGIN CERTIFICATE-----)"
                .to_owned(),
        ));
    }
    Ok(pem)
}

fn private_key(path: &Path) -> Result<Vec<u8>, SharedError> {
    let pem = read(path, "client key")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|error| {
        refused(
            path,
            format!("client key: {error}: the file must hold the client certificate's private key in PEM (-----BEGIN PRIVATE KEY-----)"),
        )
    })?;
    Ok(pem)
}

/// The file at `path` cannot serve, for `reason`.
fn refused(path: &Path, reason: String) -> SharedError {
    SharedError::Tls {
        path: path.display().to_string(),
        reason,
    }
}

/// What to add to a connection failure of the TLS handshake: how to fix it.
pub(crate) fn advice(error: &str) -> Option<&'static str> {
    if error.contains("invalid peer certificate") {
        return Some(
            "the server's TLS certificate was refused: give the CA that signed it with .ca_file(path) on Redis::builder(url) or Redis::cluster(nodes), and connect by a host name or IP the certificate names",
        );
    }
    // The server's alert: it wants a client certificate, or refused this one.
    error.contains("fatal alert").then_some(
        "the server refused the TLS handshake: if it asks for a client certificate (tls-auth-clients), give one signed by a CA it trusts with .client_cert(cert, key) on Redis::builder(url) or Redis::cluster(nodes)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_failures_say_their_fix() {
        let server = advice("invalid peer certificate: UnknownIssuer").unwrap();
        assert!(server.contains("ca_file"));
        let client = advice("received fatal alert: CertificateRequired").unwrap();
        assert!(client.contains("client_cert"));
        assert_eq!(advice("Connection refused (os error 111)"), None);
    }
}
