fn main() {
    std::process::exit(ddptop::cli::main());
}
