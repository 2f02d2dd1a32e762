/* The Huffman decoder of jpeg_huffman.c, for jpeg_region.c. */
#ifndef HETGEN_JPEG_HUFFMAN_H
#define HETGEN_JPEG_HUFFMAN_H

#include <stdio.h>

#include <jpeglib.h>

/*
 * Replaces libjpeg's entropy decoder of `cinfo` with this one's. Call after
 * jpeg_start_decompress() and before reading any scanline. Returns 1 if it did, 0 if the file
 * is one it does not cover (libjpeg's own decoder then stays).
 */
int hetgen_huffman_install(j_decompress_ptr cinfo);

#endif
