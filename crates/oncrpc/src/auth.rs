//! Authentication: `opaque_auth`, `auth_stat`, AUTH_NONE and AUTH_SYS
//! (RFC 5531 §8.2, §9 and Appendix A).

use bytes::Bytes;
use xdr::{opaque_encoded_len, Decoder, Encoder, XdrEncode, XdrRead};

/// Maximum size of an `opaque_auth` body (RFC 5531 §8.2, `MAX_AUTH_BYTES`).
pub const MAX_AUTH_BYTES: u32 = 400;
/// Maximum length of the AUTH_SYS machine name (RFC 5531 Appendix A).
pub const MAX_MACHINE_NAME: u32 = 255;
/// Maximum number of AUTH_SYS supplementary group ids (RFC 5531 Appendix A).
pub const MAX_AUTH_SYS_GIDS: u32 = 16;

/// An authentication flavor number (RFC 5531 §8.2, `auth_flavor`).
///
/// A newtype rather than an enum: flavors are an open IANA registry and a
/// peer may send any value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AuthFlavor(pub u32);

impl AuthFlavor {
    /// AUTH_NONE (0).
    pub const NONE: AuthFlavor = AuthFlavor(0);
    /// AUTH_SYS, formerly AUTH_UNIX (1).
    pub const SYS: AuthFlavor = AuthFlavor(1);
    /// AUTH_SHORT (2).
    pub const SHORT: AuthFlavor = AuthFlavor(2);
    /// AUTH_DH (3).
    pub const DH: AuthFlavor = AuthFlavor(3);
    /// RPCSEC_GSS (6).
    pub const RPCSEC_GSS: AuthFlavor = AuthFlavor(6);
}

/// `struct opaque_auth { auth_flavor flavor; opaque body<400>; }`
/// (RFC 5531 §8.2). The body is at most [`MAX_AUTH_BYTES`] long; the fields
/// are private so that invariant always holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpaqueAuth {
    flavor: AuthFlavor,
    body: Bytes,
}

/// An `opaque_auth` body longer than [`MAX_AUTH_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("opaque_auth body of {0} bytes exceeds MAX_AUTH_BYTES (400)")]
pub struct AuthBodyTooLong(pub usize);

impl OpaqueAuth {
    /// The AUTH_NONE credential or verifier (flavor 0, empty body).
    pub const fn none() -> Self {
        OpaqueAuth {
            flavor: AuthFlavor::NONE,
            body: Bytes::new(),
        }
    }

    /// An `opaque_auth`; fails if `body` exceeds [`MAX_AUTH_BYTES`].
    pub fn new(flavor: AuthFlavor, body: Bytes) -> Result<Self, AuthBodyTooLong> {
        if body.len() > MAX_AUTH_BYTES as usize {
            return Err(AuthBodyTooLong(body.len()));
        }
        Ok(OpaqueAuth { flavor, body })
    }

    /// The flavor.
    pub fn flavor(&self) -> AuthFlavor {
        self.flavor
    }

    /// The body (at most 400 bytes).
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Decode an `opaque_auth`, enforcing the 400-byte limit
    /// ([`xdr::Error::TooLong`] otherwise).
    pub fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        let flavor = AuthFlavor(r.u32()?);
        let body = r.opaque_bytes(MAX_AUTH_BYTES)?;
        Ok(OpaqueAuth { flavor, body })
    }
}

impl Default for OpaqueAuth {
    fn default() -> Self {
        OpaqueAuth::none()
    }
}

impl XdrEncode for OpaqueAuth {
    fn encoded_len(&self) -> usize {
        4 + opaque_encoded_len(self.body.len())
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        e.u32(self.flavor.0);
        e.opaque(&self.body);
    }
}

/// `enum auth_stat` (RFC 5531 §9): why the server rejected authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(missing_docs)] // names are the RFC's
pub enum AuthStat {
    /// Success (never sent in an AUTH_ERROR).
    Ok = 0,
    /// Bad credential (seal broken).
    BadCred = 1,
    /// Client must begin a new session.
    RejectedCred = 2,
    /// Bad verifier (seal broken).
    BadVerf = 3,
    /// Verifier expired or replayed.
    RejectedVerf = 4,
    /// Rejected for security reasons.
    TooWeak = 5,
    /// Bogus response verifier.
    InvalidResp = 6,
    /// Reason unknown.
    Failed = 7,
    KerbGeneric = 8,
    TimeExpire = 9,
    TktFile = 10,
    Decode = 11,
    NetAddr = 12,
    RpcsecGssCredProblem = 13,
    RpcsecGssCtxProblem = 14,
}

impl AuthStat {
    /// Map a wire value; `None` for values RFC 5531 does not define.
    pub fn from_u32(v: u32) -> Option<Self> {
        use AuthStat::*;
        Some(match v {
            0 => Ok,
            1 => BadCred,
            2 => RejectedCred,
            3 => BadVerf,
            4 => RejectedVerf,
            5 => TooWeak,
            6 => InvalidResp,
            7 => Failed,
            8 => KerbGeneric,
            9 => TimeExpire,
            10 => TktFile,
            11 => Decode,
            12 => NetAddr,
            13 => RpcsecGssCredProblem,
            14 => RpcsecGssCtxProblem,
            _ => return None,
        })
    }
}

impl core::fmt::Display for AuthStat {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?} ({})", self, *self as u32)
    }
}

/// Invalid AUTH_SYS parameters given to [`AuthSys::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthSysError {
    /// Machine name longer than 255 bytes.
    #[error("AUTH_SYS machine name of {0} bytes exceeds 255")]
    MachineNameTooLong(usize),
    /// More than 16 supplementary gids.
    #[error("AUTH_SYS with {0} gids exceeds 16")]
    TooManyGids(usize),
}

/// AUTH_SYS parameters (RFC 5531 Appendix A):
/// `struct authsys_parms { unsigned int stamp; string machinename<255>;
/// unsigned int uid; unsigned int gid; unsigned int gids<16>; }`.
///
/// The limits are enforced on construction and on decode; the encoded body is
/// at most 340 bytes, within [`MAX_AUTH_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSys {
    stamp: u32,
    machine_name: Bytes,
    uid: u32,
    gid: u32,
    gids: Vec<u32>,
}

impl AuthSys {
    /// AUTH_SYS parameters; `machine_name` ≤ 255 bytes, `gids` ≤ 16 entries.
    pub fn new(
        stamp: u32,
        machine_name: impl Into<Bytes>,
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
    ) -> Result<Self, AuthSysError> {
        let machine_name = machine_name.into();
        if machine_name.len() > MAX_MACHINE_NAME as usize {
            return Err(AuthSysError::MachineNameTooLong(machine_name.len()));
        }
        if gids.len() > MAX_AUTH_SYS_GIDS as usize {
            return Err(AuthSysError::TooManyGids(gids.len()));
        }
        Ok(AuthSys {
            stamp,
            machine_name,
            uid,
            gid,
            gids,
        })
    }

    /// Arbitrary stamp chosen by the client.
    pub fn stamp(&self) -> u32 {
        self.stamp
    }
    /// Machine name as sent (not necessarily UTF-8).
    pub fn machine_name(&self) -> &Bytes {
        &self.machine_name
    }
    /// Effective user id.
    pub fn uid(&self) -> u32 {
        self.uid
    }
    /// Effective group id.
    pub fn gid(&self) -> u32 {
        self.gid
    }
    /// Supplementary group ids (≤ 16).
    pub fn gids(&self) -> &[u32] {
        &self.gids
    }

    /// Decode an AUTH_SYS credential body. The body must hold exactly one
    /// `authsys_parms`, within the limits.
    pub fn decode_body(body: &[u8]) -> xdr::Result<Self> {
        let mut d = Decoder::new(body);
        let stamp = d.u32()?;
        let machine_name = Bytes::copy_from_slice(d.string_bytes(MAX_MACHINE_NAME)?);
        let uid = d.u32()?;
        let gid = d.u32()?;
        let n = d.array_len(MAX_AUTH_SYS_GIDS, 4)?;
        let mut gids = Vec::with_capacity(n as usize);
        for _ in 0..n {
            gids.push(d.u32()?);
        }
        d.finish()?;
        Ok(AuthSys {
            stamp,
            machine_name,
            uid,
            gid,
            gids,
        })
    }
}

impl XdrEncode for AuthSys {
    fn encoded_len(&self) -> usize {
        4 + opaque_encoded_len(self.machine_name.len()) + 4 + 4 + 4 + 4 * self.gids.len()
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        e.u32(self.stamp);
        e.opaque(&self.machine_name);
        e.u32(self.uid);
        e.u32(self.gid);
        e.u32(self.gids.len() as u32);
        for g in &self.gids {
            e.u32(*g);
        }
    }
}

/// A call's credential, interpreted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Credential {
    /// AUTH_NONE.
    #[default]
    None,
    /// AUTH_SYS.
    Sys(AuthSys),
    /// Any other flavor, uninterpreted (clients may send it; the
    /// [`Dispatcher`](crate::Dispatcher) rejects flavors it does not know
    /// with AUTH_BADCRED).
    Other(OpaqueAuth),
}

impl Credential {
    /// The wire form.
    pub fn to_opaque_auth(&self) -> OpaqueAuth {
        match self {
            Credential::None => OpaqueAuth::none(),
            Credential::Sys(s) => OpaqueAuth {
                flavor: AuthFlavor::SYS,
                // Cannot fail: an AuthSys encodes to at most 340 bytes.
                body: xdr::encode_to_bytes(s).unwrap_or_default(),
            },
            Credential::Other(o) => o.clone(),
        }
    }

    /// Interpret a received credential as a server does: AUTH_NONE must have
    /// an empty body and AUTH_SYS a well-formed one, else
    /// [`AuthStat::BadCred`]; other flavors are returned as
    /// [`Credential::Other`].
    pub fn from_opaque_auth(a: &OpaqueAuth) -> Result<Self, AuthStat> {
        match a.flavor {
            AuthFlavor::NONE if a.body.is_empty() => Ok(Credential::None),
            AuthFlavor::NONE => Err(AuthStat::BadCred),
            AuthFlavor::SYS => AuthSys::decode_body(&a.body)
                .map(Credential::Sys)
                .map_err(|_| AuthStat::BadCred),
            _ => Ok(Credential::Other(a.clone())),
        }
    }

    /// The flavor.
    pub fn flavor(&self) -> AuthFlavor {
        match self {
            Credential::None => AuthFlavor::NONE,
            Credential::Sys(_) => AuthFlavor::SYS,
            Credential::Other(o) => o.flavor,
        }
    }
}
