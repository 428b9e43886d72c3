"""`patchkit doctor`'s model: the tools and toolkits here, and a verdict per recipe."""
