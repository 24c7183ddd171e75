"""Speed: the packed engine against the naive loop, the roofline and the machine's rates."""
