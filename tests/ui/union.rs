#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
union IntOrFloat {
    i: u32,
    f: f32,
}

fn main() {}
