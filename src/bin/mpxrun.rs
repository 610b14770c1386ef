//! `mpxrun -n N [--no-prefix] [--keep-going] program [args...]`: runs N
//! processes of `program` on this host as one mpx job (see
//! `mpx_net::bootstrap::mpxrun`).

fn main() {
    mpx_net::bootstrap::mpxrun::main()
}
