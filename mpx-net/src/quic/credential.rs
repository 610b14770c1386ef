//! The job's credential: a certificate authority made for one job, and a
//! certificate per rank that names the rank, for mutual TLS.
//!
//! A rank's certificate carries one DNS name, `rank-<r>.job-<id>.mpx`
//! (the job id in 16 hex digits), signed by the job's CA. A rank dialling
//! rank `r` asks for that name, so TLS itself refuses a server holding
//! another rank's certificate; a rank accepting a connection learns from
//! the client's certificate which rank it is ([`RankCredential::rank_of`])
//! and refuses a hello or a bulk stream that claims another. A
//! certificate of another job's CA fails the handshake both ways.

use std::sync::Arc;

use mpx_core::{Error, ErrorKind, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

/// The protocol name both sides announce in TLS (ALPN).
pub(crate) const ALPN: &[u8] = b"mpx/1";

fn tls_error(context: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::transport(context.to_string(), e)
}

/// The DNS name a rank's certificate carries.
pub fn rank_name(job: u64, rank: u32) -> String {
    format!("rank-{rank}.job-{job:016x}.mpx")
}

/// A job's certificate authority: it issues one [`RankCredential`] per
/// rank. Whoever starts the job makes one ([`JobCredential::generate`]) and
/// hands each rank its own credential (as PEM text, see
/// [`RankCredential::to_pem`]); the CA's key never needs to leave the
/// launcher.
///
/// ```
/// use mpx_net::quic::JobCredential;
/// let job = JobCredential::generate(42)?;
/// let two = job.issue(2)?;
/// assert_eq!((two.job(), two.rank()), (42, 2));
/// # Ok::<(), mpx_core::Error>(())
/// ```
pub struct JobCredential {
    job: u64,
    params: CertificateParams,
    key: KeyPair,
    cert: CertificateDer<'static>,
    cert_pem: String,
}

impl JobCredential {
    /// A new CA for job `job`, with a fresh key (see the type's example).
    pub fn generate(job: u64) -> Result<JobCredential> {
        let key = KeyPair::generate().map_err(|e| tls_error("generating the job's key", e))?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| tls_error("the job's certificate", e))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        params.distinguished_name.push(DnType::CommonName, format!("mpx job {job:016x}"));
        let cert = params.self_signed(&key).map_err(|e| tls_error("signing the job's certificate", e))?;
        Ok(JobCredential { job, params, key, cert: cert.der().clone(), cert_pem: cert.pem() })
    }

    /// The job's id.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// The credential of rank `rank`: a fresh key and a certificate naming
    /// the rank, signed by this CA.
    ///
    /// ```
    /// let job = mpx_net::quic::JobCredential::generate(9)?;
    /// let ranks: Vec<_> = (0..3).map(|r| job.issue(r)).collect::<mpx_core::Result<_>>()?;
    /// assert_eq!(ranks[2].rank(), 2);
    /// assert!(ranks[1].to_pem().contains("rank=1"));
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn issue(&self, rank: u32) -> Result<RankCredential> {
        let key = KeyPair::generate().map_err(|e| tls_error("generating a rank's key", e))?;
        let mut params =
            CertificateParams::new(vec![rank_name(self.job, rank)]).map_err(|e| tls_error("a rank's certificate", e))?;
        params.distinguished_name.push(DnType::CommonName, rank_name(self.job, rank));
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).map_err(|e| tls_error("signing a rank's certificate", e))?;
        let pem = format!("{PEM_LABEL} job={:016x} rank={rank}\n{}{}{}", self.job, cert.pem(), key.serialize_pem(), self.cert_pem);
        Ok(RankCredential {
            job: self.job,
            rank,
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            trust: Trust::Ca(self.cert.clone()),
            pem,
        })
    }
}

/// What one rank holds of its job's credential: its certificate and key,
/// and the job's CA certificate to check its peers with.
pub struct RankCredential {
    job: u64,
    rank: u32,
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
    trust: Trust,
    /// The same as PEM text (see [`to_pem`](RankCredential::to_pem)).
    pem: String,
}

/// Whom a rank trusts.
#[derive(Clone)]
enum Trust {
    /// Certificates the job's CA signed.
    Ca(CertificateDer<'static>),
    /// Each rank's own certificate, by its SHA-256 fingerprint, in rank
    /// order: learned through a launcher's private channel (see
    /// [`RankCredential::pin`]).
    Pinned(Arc<Vec<Fingerprint>>),
}

/// The SHA-256 digest of a certificate's DER encoding.
pub type Fingerprint = [u8; 32];

/// The fingerprint of `cert` (a certificate's DER encoding).
///
/// ```
/// let f = mpx_net::quic::fingerprint(b"not really a certificate");
/// assert_eq!(f.len(), 32);
/// ```
pub fn fingerprint(cert: &[u8]) -> Fingerprint {
    let digest = ring::digest::digest(&ring::digest::SHA256, cert);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

impl Clone for RankCredential {
    fn clone(&self) -> Self {
        RankCredential {
            job: self.job,
            rank: self.rank,
            cert: self.cert.clone(),
            key: self.key.clone_key(),
            trust: self.trust.clone(),
            pem: self.pem.clone(),
        }
    }
}

impl std::fmt::Debug for RankCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RankCredential(rank {} of job {:016x})", self.rank, self.job)
    }
}

/// The header line of the PEM text of a [`RankCredential`], which says
/// its job and rank.
const PEM_LABEL: &str = "# mpx rank credential";

impl RankCredential {
    /// A credential of its own for rank `rank` of job `job`, with no CA: a
    /// new key and a certificate naming the rank, signed by that key. It
    /// trusts no peer until [`pin`](RankCredential::pin) gives it every
    /// rank's [`fingerprint`](RankCredential::fingerprint), exchanged over
    /// a channel private to the job (a launcher's key-value space).
    ///
    /// ```
    /// use mpx_net::quic::RankCredential;
    /// let mut zero = RankCredential::self_signed(9, 0)?;
    /// let one = RankCredential::self_signed(9, 1)?;
    /// zero.pin(vec![zero.fingerprint(), one.fingerprint()])?;
    /// assert_ne!(zero.fingerprint(), one.fingerprint());
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn self_signed(job: u64, rank: u32) -> Result<RankCredential> {
        let key = KeyPair::generate().map_err(|e| tls_error("generating a rank's key", e))?;
        let mut params =
            CertificateParams::new(vec![rank_name(job, rank)]).map_err(|e| tls_error("a rank's certificate", e))?;
        params.distinguished_name.push(DnType::CommonName, rank_name(job, rank));
        let cert = params.self_signed(&key).map_err(|e| tls_error("signing a rank's certificate", e))?;
        let pem = format!("{PEM_LABEL} job={job:016x} rank={rank} (pinned)\n{}{}", cert.pem(), key.serialize_pem());
        Ok(RankCredential {
            job,
            rank,
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            trust: Trust::Pinned(Arc::new(Vec::new())),
            pem,
        })
    }

    /// The fingerprint of this rank's certificate, for its peers to pin.
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(&self.cert)
    }

    /// Trusts exactly the ranks whose certificates have these fingerprints,
    /// in rank order (this rank's own among them): for a credential made
    /// by [`self_signed`](RankCredential::self_signed).
    pub fn pin(&mut self, fingerprints: Vec<Fingerprint>) -> Result<()> {
        if fingerprints.get(self.rank as usize) != Some(&self.fingerprint()) {
            return Err(ErrorKind::InvalidArgument(format!("the fingerprints pinned do not give rank {} its own", self.rank)).into());
        }
        match &mut self.trust {
            Trust::Pinned(pins) => *pins = Arc::new(fingerprints),
            Trust::Ca(_) => return Err(ErrorKind::InvalidArgument("a credential of a job CA trusts its CA, not pins".into()).into()),
        }
        Ok(())
    }

    /// The job's id.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// The rank the certificate names.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The credential as PEM text, to hand to the rank's process (in a
    /// file or an environment variable): a line naming job and rank, the
    /// rank's certificate, its private key, and the job's CA certificate.
    /// Whoever reads it can act as this rank: keep it private.
    ///
    /// ```
    /// use mpx_net::quic::{JobCredential, RankCredential};
    /// let one = JobCredential::generate(7)?.issue(1)?;
    /// let back = RankCredential::from_pem(&one.to_pem())?;
    /// assert_eq!((back.job(), back.rank()), (7, 1));
    /// assert!(RankCredential::from_pem("not a credential").is_err());
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn to_pem(&self) -> String {
        self.pem.clone()
    }

    /// Reads what [`to_pem`](RankCredential::to_pem) wrote.
    pub fn from_pem(text: &str) -> Result<RankCredential> {
        let bad = |why: &str| -> Error { ErrorKind::InvalidArgument(format!("not an mpx rank credential: {why}")).into() };
        let first = text.lines().next().unwrap_or_default();
        let fields = first.strip_prefix(PEM_LABEL).ok_or_else(|| bad("no header line"))?;
        let mut job = None;
        let mut rank = None;
        for field in fields.split_whitespace() {
            match field.split_once('=') {
                Some(("job", v)) => job = u64::from_str_radix(v, 16).ok(),
                Some(("rank", v)) => rank = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (job, rank) = (job.ok_or_else(|| bad("no job"))?, rank.ok_or_else(|| bad("no rank"))?);
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(text.as_bytes())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(&e.to_string()))?;
        let [cert, ca] = <[CertificateDer<'static>; 2]>::try_from(certs).map_err(|_| bad("it needs two certificates"))?;
        let key = PrivatePkcs8KeyDer::from_pem_slice(text.as_bytes()).map_err(|e| bad(&e.to_string()))?;
        Ok(RankCredential { job, rank, cert, key, trust: Trust::Ca(ca), pem: text.to_string() })
    }

    /// The rank of this job that `cert` (a peer's end-entity certificate,
    /// already verified by TLS against the job's CA or the pinned
    /// fingerprints) names: what a connection's peer is known to be as
    /// soon as its handshake is over, before it has sent anything.
    pub(crate) fn rank_of(&self, cert: &CertificateDer<'_>) -> Result<u32> {
        let unnamed = || -> Error { ErrorKind::Protocol("the peer's certificate names no rank of this job".into()).into() };
        match &self.trust {
            Trust::Pinned(pins) => {
                let print = fingerprint(cert);
                pins.iter().position(|pin| *pin == print).and_then(|r| u32::try_from(r).ok()).ok_or_else(unnamed)
            }
            Trust::Ca(_) => {
                let end = webpki::EndEntityCert::try_from(cert).map_err(|e| tls_error("reading a peer's certificate", e))?;
                let suffix = format!(".job-{:016x}.mpx", self.job);
                // The names only suggest a rank: each is checked as TLS
                // checks a name.
                let suggested: Vec<u32> =
                    end.valid_dns_names().filter_map(|name| name.strip_prefix("rank-")?.strip_suffix(suffix.as_str())?.parse().ok()).collect();
                suggested.into_iter().find(|&rank| self.check_names(cert, rank).is_ok()).ok_or_else(unnamed)
            }
        }
    }

    /// Fails unless `cert` (a peer's end-entity certificate, already
    /// verified against the job's CA by TLS) names rank `rank` of this job.
    pub(crate) fn check_names(&self, cert: &CertificateDer<'_>, rank: u32) -> Result<()> {
        if let Trust::Pinned(pins) = &self.trust {
            return match pins.get(rank as usize) {
                Some(pin) if *pin == fingerprint(cert) => Ok(()),
                _ => Err(ErrorKind::Protocol(format!("the peer's certificate is not rank {rank}'s")).into()),
            };
        }
        let name = ServerName::try_from(rank_name(self.job, rank)).map_err(|e| tls_error("a rank's name", e))?;
        let end = webpki::EndEntityCert::try_from(cert).map_err(|e| tls_error("reading a peer's certificate", e))?;
        end.verify_is_valid_for_subject_name(&name)
            .map_err(|_| ErrorKind::Protocol(format!("the peer's certificate does not name rank {rank} of this job")).into())
    }

    fn roots(&self) -> Result<Arc<rustls::RootCertStore>> {
        let mut roots = rustls::RootCertStore::empty();
        let Trust::Ca(ca) = &self.trust else {
            return Err(ErrorKind::InvalidArgument("a pinned credential has no CA".into()).into());
        };
        roots.add(ca.clone()).map_err(|e| tls_error("the job's CA certificate", e))?;
        Ok(Arc::new(roots))
    }

    /// quinn's server configuration: TLS 1.3, a client certificate of the
    /// job required.
    pub(crate) fn server_config(&self) -> Result<quinn::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn rustls::server::danger::ClientCertVerifier> = match &self.trust {
            Trust::Ca(_) => rustls::server::WebPkiClientVerifier::builder_with_provider(self.roots()?, provider.clone())
                .build()
                .map_err(|e| tls_error("the client verifier", e))?,
            Trust::Pinned(pins) => Arc::new(pinned::Verifier { pins: pins.clone(), provider: provider.clone() }),
        };
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_error("TLS versions", e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert.clone()], PrivateKeyDer::Pkcs8(self.key.clone_key()))
            .map_err(|e| tls_error("this rank's certificate", e))?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(|e| tls_error("QUIC over TLS", e))?;
        Ok(quinn::ServerConfig::with_crypto(Arc::new(quic)))
    }

    /// quinn's client configuration: TLS 1.3, the server checked against
    /// the job's CA, this rank's certificate presented.
    pub(crate) fn client_config(&self) -> Result<quinn::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_error("TLS versions", e))?;
        let builder = match &self.trust {
            Trust::Ca(_) => builder.with_root_certificates(self.roots()?),
            Trust::Pinned(pins) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(pinned::Verifier { pins: pins.clone(), provider })),
        };
        let mut tls = builder
            .with_client_auth_cert(vec![self.cert.clone()], PrivateKeyDer::Pkcs8(self.key.clone_key()))
            .map_err(|e| tls_error("this rank's certificate", e))?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| tls_error("QUIC over TLS", e))?;
        Ok(quinn::ClientConfig::new(Arc::new(quic)))
    }
}

/// Trust by pinned fingerprints: a peer's certificate is accepted when its
/// fingerprint is the one its rank published, and its handshake signature
/// checks out against it. A dialled rank is known by the name dialled
/// ([`rank_name`]); an accepting rank takes any of the job's certificates
/// in the handshake and learns the rank from it afterwards
/// ([`RankCredential::rank_of`]).
mod pinned {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
    use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

    use super::{fingerprint, Fingerprint};

    #[derive(Debug)]
    pub(super) struct Verifier {
        pub(super) pins: Arc<Vec<Fingerprint>>,
        pub(super) provider: Arc<CryptoProvider>,
    }

    fn refused() -> rustls::Error {
        rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)
    }

    type Signature = Result<HandshakeSignatureValid, rustls::Error>;

    impl Verifier {
        fn tls12(&self, m: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Signature {
            rustls::crypto::verify_tls12_signature(m, cert, dss, &self.provider.signature_verification_algorithms)
        }

        fn tls13(&self, m: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Signature {
            rustls::crypto::verify_tls13_signature(m, cert, dss, &self.provider.signature_verification_algorithms)
        }

        fn schemes(&self) -> Vec<SignatureScheme> {
            self.provider.signature_verification_algorithms.supported_schemes()
        }
    }

    impl ServerCertVerifier for Verifier {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            _ocsp: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            let ServerName::DnsName(name) = server_name else { return Err(refused()) };
            let rank: Option<usize> =
                name.as_ref().strip_prefix("rank-").and_then(|r| r.split('.').next()).and_then(|r| r.parse().ok());
            match rank.and_then(|r| self.pins.get(r)) {
                Some(pin) if *pin == fingerprint(end_entity) => Ok(ServerCertVerified::assertion()),
                _ => Err(refused()),
            }
        }

        fn verify_tls12_signature(&self, m: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Signature {
            self.tls12(m, cert, dss)
        }

        fn verify_tls13_signature(&self, m: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Signature {
            self.tls13(m, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.schemes()
        }
    }

    impl ClientCertVerifier for Verifier {
        fn root_hint_subjects(&self) -> &[DistinguishedName] {
            &[]
        }

        fn verify_client_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _now: UnixTime,
        ) -> Result<ClientCertVerified, rustls::Error> {
            if self.pins.contains(&fingerprint(end_entity)) {
                Ok(ClientCertVerified::assertion())
            } else {
                Err(refused())
            }
        }

        fn verify_tls12_signature(&self, m: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Signature {
            self.tls12(m, cert, dss)
        }

        fn verify_tls13_signature(&self, m: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Signature {
            self.tls13(m, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.schemes()
        }
    }
}
