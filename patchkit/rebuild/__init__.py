"""`patchkit rebuild`: rebuild a release from its own manifest and sources, compare every file."""
