//! Distinct initial levels over seeds `0..N` per config (the tie-break of step 3 in
//! `src/generator.rs`): `cargo run --release -p ragen-sokoban --example diversity [N]`.

use std::collections::HashSet;
use std::time::Instant;

use ragen_sokoban::{GridVocab, SokobanConfig, generate};

fn sized(dim_x: u32, dim_y: u32, num_boxes: u32) -> SokobanConfig {
    SokobanConfig {
        dim_x,
        dim_y,
        num_boxes,
        ..SokobanConfig::default()
    }
}

fn main() {
    let seeds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let configs = [
        ("SimpleSokoban 6x6/1", SokobanConfig::default()),
        (
            "DifferentGridVocab 6x6/1",
            SokobanConfig::different_grid_vocab(),
        ),
        ("LargerSokoban 8x8/2", SokobanConfig::larger()),
        ("6x6/2", sized(6, 6, 2)),
        ("6x6/3", sized(6, 6, 3)),
        ("5x5/1", sized(5, 5, 1)),
        ("5x5/2", sized(5, 5, 2)),
        ("5x5/3", sized(5, 5, 3)),
        ("4x5/1", sized(4, 5, 1)),
    ];
    println!("config                    distinct  fallback seeds  time");
    for (name, config) in configs {
        let started = Instant::now();
        let mut levels = HashSet::new();
        let mut fallbacks = 0;
        for seed in 0..seeds {
            let generated = generate(&config, seed).expect("a level for every seed");
            fallbacks += u32::from(generated.seed_attempts > 1);
            levels.insert(generated.level.render(GridVocab::Standard));
        }
        println!(
            "{name:25} {:>5}/{seeds}  {fallbacks:>14}  {:.2?}",
            levels.len(),
            started.elapsed()
        );
    }
}
