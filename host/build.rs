//! Links what Debian's static RocksDB archive needs when it is linked
//! statically (`ROCKSDB_STATIC`, set in `.cargo/config.toml`): its
//! compression libraries, as shared objects (other crates may bring their
//! own static copy of some; a shared one never clashes with it). The C++
//! JSON scanner is built by `json/build.rs`.

fn main() {
    println!("cargo:rerun-if-env-changed=ROCKSDB_STATIC");
    if std::env::var_os("ROCKSDB_STATIC").is_some() {
        for library in ["snappy", "lz4", "zstd", "bz2", "z"] {
            println!("cargo:rustc-link-lib=dylib={library}");
        }
    }
}
