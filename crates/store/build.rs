// `sqlx::migrate!` embeds the migrations at compile time; without this a
// migration added or renamed is not seen until some Rust file of the crate
// changes (sqlx's own advice: `sqlx migrate build-script`).
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
