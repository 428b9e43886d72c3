"""What patchkit reads out of the binaries it ships (ELF dynamic sections)."""
