//! The daemon's configuration (a TOML file; every key optional).
//!
//! ```toml
//! socket = "/run/vino/vinod.sock"
//! image = "/var/lib/vino/disk.img"
//! image_size = "1G"          # made with this size on first use
//! cache_frames = 1024         # 4 KiB frames
//! privileged_group = "vino"   # members may graft global graftpoints (a name or a gid)
//! max_connections = 256
//! max_connections_per_user = 64   # for each uid but root's
//! root_reserved_connections = 8   # of max_connections, kept for root
//! frame_timeout = 10          # seconds a request may take to arrive once it has begun
//! socket_mode = 0o666
//! ```

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the daemon runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub socket: PathBuf,
    pub image: PathBuf,
    /// Size of an image made on first use, e.g. `256M`, `1G`.
    pub image_size: String,
    pub cache_frames: usize,
    /// A group (name or number) whose members are privileged, as root is.
    pub privileged_group: Option<String>,
    /// Connections at once, all users together.
    pub max_connections: usize,
    /// Connections at once of any one uid but root.
    pub max_connections_per_user: usize,
    /// Of `max_connections`, how many only root may use: the users other than root together
    /// have `max_connections - root_reserved_connections`.
    pub root_reserved_connections: usize,
    /// How long a frame may take to arrive once its first byte has (seconds in the file, e.g.
    /// `10` or `2.5`); a connection that takes longer is closed.
    #[serde(deserialize_with = "seconds")]
    pub frame_timeout: Duration,
    /// Permission bits of the socket (who may connect).
    pub socket_mode: u32,
    /// Largest shared memory a client may pass.
    pub max_shm: u64,
    /// Where to mount the file system through FUSE (for unmodified programs), if anywhere.
    pub mount: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: PathBuf::from(vino_proto::DEFAULT_SOCKET),
            image: PathBuf::from("vino.img"),
            image_size: "256M".into(),
            cache_frames: 1024,
            privileged_group: None,
            max_connections: 256,
            max_connections_per_user: 64,
            root_reserved_connections: 8,
            frame_timeout: Duration::from_secs(10),
            socket_mode: 0o666,
            max_shm: vino_proto::MAX_SHM,
            mount: None,
        }
    }
}

impl Config {
    /// Reads a configuration file.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The image size in bytes.
    pub fn image_bytes(&self) -> Result<u64, String> {
        parse_size(&self.image_size)
    }

    /// The privileged group's id, if one is configured.
    pub fn privileged_gid(&self) -> Result<Option<u32>, String> {
        let Some(g) = &self.privileged_group else {
            return Ok(None);
        };
        if let Ok(gid) = g.parse::<u32>() {
            return Ok(Some(gid));
        }
        match nix::unistd::Group::from_name(g) {
            Ok(Some(group)) => Ok(Some(group.gid.as_raw())),
            Ok(None) => Err(format!("privileged_group: no group named `{g}`")),
            Err(e) => Err(format!("privileged_group `{g}`: {e}")),
        }
    }
}

/// A positive number of seconds.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = f64::deserialize(d)?;
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| serde::de::Error::custom(format!("{s} is not a positive number of seconds")))
}

/// Parses a size such as `64M`, `2G`, `4096`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. 64M, 2G)"))?;
    let mult = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(format!("`{text}`: unknown unit `{unit}` (K, M, G)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_reads_and_unknown_keys_are_refused() {
        let c: Config = toml::from_str("socket = \"/tmp/s\"\ncache_frames = 64\nprivileged_group = \"0\"").unwrap();
        assert_eq!(c.socket, PathBuf::from("/tmp/s"));
        assert_eq!(c.cache_frames, 64);
        assert_eq!(c.privileged_gid().unwrap(), Some(0));
        assert!(toml::from_str::<Config>("sockets = 1").is_err());
        let c: Config = toml::from_str("frame_timeout = 3\nmax_connections_per_user = 4").unwrap();
        assert_eq!(
            (c.frame_timeout, c.max_connections_per_user),
            (Duration::from_secs(3), 4)
        );
        let c: Config = toml::from_str("frame_timeout = 0.25").unwrap();
        assert_eq!(c.frame_timeout, Duration::from_millis(250));
        assert!(toml::from_str::<Config>("frame_timeout = 0").is_err());
        assert!(toml::from_str::<Config>("frame_timeout = -1").is_err());
        let d = Config::default();
        assert_eq!((d.max_connections_per_user, d.root_reserved_connections), (64, 8));
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert!(parse_size("12Q").is_err());
    }
}
