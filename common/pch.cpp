// Compiled only to produce the precompiled libtorch header every target reuses.
