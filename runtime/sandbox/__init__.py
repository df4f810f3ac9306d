"""Pure OS code for a child's sandbox: workdir, rlimits, identity, parent-death signal."""
