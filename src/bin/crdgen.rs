//! Writes the CRDs generated from the Rust types to `crds/` (or the directory given).

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "crds".into()));
    std::fs::create_dir_all(&dir)?;
    for (file, yaml) in laneway::api::crd_documents() {
        let path = dir.join(file);
        std::fs::write(&path, yaml)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
