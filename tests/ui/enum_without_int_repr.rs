#[derive(Clone, Copy, mpx::MpiType)]
enum Direction {
    North,
    South,
}

fn main() {}
