//! TLS on the multi-node TCP channel, when asked (`--tls`, `[nodes] tls = true`;
//! docs/multinode.md). No CA: ddptop makes a self-signed certificate when its listener starts
//! (one per multi-node run, unless runs overlap and share the listener), and hands the SHA-256
//! fingerprint of its DER encoding to the remote ranks and agents with the token, over the node
//! command's stdin. A client accepts exactly that certificate and nothing else: the Rust agent
//! through a rustls verifier pinned to the fingerprint, the Python client by comparing the
//! peer certificate's digest (stdlib `ssl` + `hashlib`).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

/// The server name in the certificate (clients do not check names: the pin is the fingerprint).
pub const CERT_NAME: &str = "ddptop";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// SHA-256 of a DER certificate, lowercase hex (64 characters).
pub fn fingerprint(der: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A listener's certificate: the rustls server side and the fingerprint clients pin.
#[derive(Clone)]
pub struct ListenerCert {
    pub fingerprint: String,
    pub server: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ListenerCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ListenerCert({})", self.fingerprint)
    }
}

/// A fresh self-signed certificate and key (ECDSA P-256), kept in memory only.
pub fn generate() -> anyhow::Result<ListenerCert> {
    let ck = rcgen::generate_simple_self_signed(vec![CERT_NAME.to_string()])
        .map_err(|e| anyhow::anyhow!("cannot make the TLS certificate: {e}"))?;
    let der = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let fingerprint = fingerprint(&der);
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
    Ok(ListenerCert {
        fingerprint,
        server: Arc::new(server),
    })
}

/// Whether `s` is a fingerprint as `fingerprint` writes it.
pub fn is_fingerprint(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Accepts the one certificate whose fingerprint it was given; signatures are still checked
/// with the certificate's key, so only the holder of the private key passes.
#[derive(Debug)]
struct Pinned {
    fingerprint: String,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if fingerprint(end_entity) == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client configuration that trusts exactly the certificate with `fingerprint`.
pub fn pinned_client(fingerprint: &str) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    if !is_fingerprint(fingerprint) {
        anyhow::bail!("the TLS fingerprint must be 64 lowercase hex characters");
    }
    let provider = provider();
    let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            fingerprint: fingerprint.to_string(),
            provider,
        }))
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn handshake(cert: &ListenerCert, pin: &str) -> Result<String, String> {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(cert.server.clone());
        let server = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            match acceptor.accept(s).await {
                Ok(mut t) => {
                    let _ = t.write_all(b"hi\n").await;
                    let _ = t.shutdown().await;
                    Ok(())
                }
                Err(e) => Err(e.to_string()),
            }
        });
        let conn = tokio_rustls::TlsConnector::from(pinned_client(pin).unwrap());
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from(CERT_NAME).unwrap();
        let out = match conn.connect(name, tcp).await {
            Ok(mut t) => {
                let mut s = String::new();
                let _ = t.read_to_string(&mut s).await;
                Ok(s)
            }
            Err(e) => Err(e.to_string()),
        };
        let srv = server.await.unwrap();
        if out.is_err() {
            assert!(srv.is_err(), "the server sees the refusal too: {srv:?}");
        }
        out
    }

    #[tokio::test]
    async fn the_pinned_certificate_is_accepted_and_no_other() {
        let cert = generate().unwrap();
        assert!(is_fingerprint(&cert.fingerprint));
        assert_eq!(handshake(&cert, &cert.fingerprint).await.unwrap(), "hi\n");
        let other = generate().unwrap();
        assert_ne!(other.fingerprint, cert.fingerprint, "a fresh key each time");
        let e = handshake(&cert, &other.fingerprint).await.unwrap_err();
        assert!(e.to_lowercase().contains("certificate"), "{e}");
        assert!(pinned_client("abc").is_err());
    }
}
