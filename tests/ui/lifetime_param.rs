#[derive(Clone, Copy, mpx::MpiType)]
#[repr(C)]
struct View<'a> {
    len: usize,
    marker: std::marker::PhantomData<&'a u8>,
}

fn main() {}
