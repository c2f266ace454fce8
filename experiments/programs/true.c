/* The trivial child of `procs spawn`: it starts and exits. */
int main(void) { return 0; }
