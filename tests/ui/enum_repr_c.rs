#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
enum Direction {
    North,
    South,
}

fn main() {}
