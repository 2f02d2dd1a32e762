/*
 * A faster Huffman decoder for baseline JPEGs, plugged into libjpeg-turbo in place of its own.
 *
 * Entropy decoding is about half of the time a region decode takes (BENCHMARKS.md), and no crop
 * avoids it above the region's last row. libjpeg's decoder reads one symbol per table lookup and
 * then its extra bits, refilling its bit buffer a byte at a time with a 0xFF test per byte. This
 * one, as in stb_image and other fast decoders, looks up most AC coefficients whole: one
 * 9-bit lookup gives the zero run, the coefficient's value and the bits both take, and the
 * buffer is refilled 8 bytes at a time when none of them is 0xFF (a byte-stuffed 0xFF00 or a
 * marker). Entropy decoding is lossless, so the coefficients, and every pixel after them, are
 * the ones libjpeg's own decoder makes (tests compare the two byte for byte).
 *
 * libjpeg is built from replaceable modules (`jpegint.h`, installed with its headers, says what
 * each one is): after jpeg_start_decompress() has set up a single-scan baseline decode and
 * before any entropy-coded data is read, hetgen_huffman_install() replaces the entropy decoder
 * module. Everything else stays libjpeg's: markers, the IDCT, upsampling, colour conversion,
 * jpeg_crop_scanline() and jpeg_skip_scanlines() (which call this decoder too). Files it does
 * not cover (progressive, arithmetic-coded, restart intervals, multi-scan, 12-bit) keep
 * libjpeg's decoder.
 *
 * Damaged data behaves as with libjpeg: a bad code warns (ignored, as libjpeg goes on), data
 * that stops at a marker warns "premature end of data segment" and leaves the rest of the image
 * grey, and data that runs past the end of the file is libjpeg's JWRN_JPEG_EOF, which the
 * caller's warning handler turns into an error.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <jpegint.h>

#include "jpeg_huffman.h"

/* Bits looked up at once; longer codes take the canonical slow path. */
#define FAST_BITS 11
#define FAST_SIZE (1 << FAST_BITS)

/* A lookup entry that holds a whole AC coefficient, not only a symbol. */
#define WHOLE 0x80

/*
 * Zigzag position -> natural position, with 16 extra entries of 63 so that a corrupt zero run
 * past the end of a block (k + 15 <= 78) stores into the block's last coefficient, as
 * libjpeg's jpeg_natural_order does.
 */
static const uint8_t natural_order[DCTSIZE2 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
};

struct table {
    /*
     * Indexed by the next FAST_BITS bits. For a code of at most FAST_BITS bits:
     * (symbol << 8) | length; in AC tables, when the code and its extra bits fit in FAST_BITS
     * together, (value << 16) | (zero run << 8) | WHOLE | length of both instead. 0: the code
     * is longer.
     */
    int32_t fast[FAST_SIZE];
    /* The canonical decode: the largest code of each length (-1: none) and, per length, the
     * index of its first symbol in `value` minus its first code. */
    int32_t max_code[17];
    int32_t offset[17];
    uint8_t value[256];
};

/* The bit reader: `buffer` holds `count` bits, the next one in its top bit. */
struct bits {
    uint64_t buffer;
    int count;
    /* Zero bits appended after the data stopped (at a marker or at the end of the file):
     * decoding has read past the data once `count < padding`. */
    int padding;
    int at_end_of_file;
    const uint8_t *next;
    const uint8_t *end;
};

struct entropy {
    struct jpeg_entropy_decoder pub; /* first, so libjpeg's pointer to it is a pointer to this */
    struct bits bits;
    int last_dc[MAX_COMPS_IN_SCAN];
    const struct table *dc[D_MAX_BLOCKS_IN_MCU];
    const struct table *ac[D_MAX_BLOCKS_IN_MCU];
    int component[D_MAX_BLOCKS_IN_MCU];
    boolean dc_needed[D_MAX_BLOCKS_IN_MCU];
    boolean ac_needed[D_MAX_BLOCKS_IN_MCU];
};

static int extend(uint32_t v, int s) {
    return v < (1u << (s - 1)) ? (int)v - (1 << s) + 1 : (int)v;
}

/*
 * Builds `t` from a DHT table; returns 0 if the table is malformed (libjpeg has already
 * refused those, so this is only a guard).
 */
static int build_table(struct table *t, const JHUFF_TBL *h, int is_ac) {
    memset(t->fast, 0, sizeof t->fast);
    int index = 0;
    uint32_t code = 0;
    for (int len = 1; len <= 16; len++) {
        int n = h->bits[len];
        /* Too many symbols, or codes past the all-ones code of this length (which libjpeg
         * refuses too). */
        if (index + n > 256 || (n > 0 && code + (uint32_t)n >= (1u << len))) {
            return 0;
        }
        t->offset[len] = index - (int32_t)code;
        t->max_code[len] = n ? (int32_t)(code + n - 1) : -1;
        for (int i = 0; i < n; i++, index++, code++) {
            uint8_t sym = h->huffval[index];
            if (!is_ac && sym > 15) {
                return 0; /* a DC difference has at most 15 bits */
            }
            t->value[index] = sym;
            if (len > FAST_BITS) {
                continue;
            }
            int spare = FAST_BITS - len;
            uint32_t first = code << spare;
            for (uint32_t j = 0; j < (1u << spare); j++) {
                uint32_t look = first | j;
                int run = sym >> 4, size = sym & 15;
                if (is_ac && size != 0 && len + size <= FAST_BITS) {
                    uint32_t extra = (look >> (spare - size)) & ((1u << size) - 1);
                    int v = extend(extra, size);
                    t->fast[look] = (int32_t)((uint32_t)v << 16 | (uint32_t)run << 8 | WHOLE |
                                              (uint32_t)(len + size));
                } else {
                    t->fast[look] = sym << 8 | len;
                }
            }
        }
        code <<= 1;
    }
    return 1;
}

/* Appends zero bits: the data stopped. */
static void pad(struct bits *b) {
    b->count += 8;
    b->padding += 8;
}

/* Refills a byte at a time, unstuffing 0xFF00 and stopping at markers, as libjpeg does. */
static void refill_slowly(j_decompress_ptr cinfo, struct bits *b) {
    while (b->count <= 56) {
        if (b->padding > 0 || b->next >= b->end) {
            if (b->padding == 0) {
                b->at_end_of_file = 1;
            }
            pad(b);
            continue;
        }
        const uint8_t *p = b->next;
        unsigned c = *p++;
        if (c == 0xFF) {
            /* Fill bytes (0xFF...) may precede a stuffed zero or a marker. */
            while (p < b->end && *p == 0xFF) {
                p++;
            }
            if (p >= b->end) {
                b->next = p;
                b->at_end_of_file = 1;
                pad(b);
                continue;
            }
            unsigned after = *p++;
            if (after != 0) {
                /* A marker: libjpeg's marker reader takes it from here. */
                cinfo->unread_marker = (int)after;
                b->next = p;
                pad(b);
                continue;
            }
        }
        b->next = p;
        b->buffer |= (uint64_t)c << (56 - b->count);
        b->count += 8;
    }
}

/* Makes at least 32 bits available: a code (16) and its extra bits (15) fit. */
static inline void refill(j_decompress_ptr cinfo, struct bits *b) {
    if (b->count >= 32) {
        return;
    }
    if (b->padding == 0 && b->end - b->next >= 8) {
        uint64_t word;
        memcpy(&word, b->next, 8);
        word = __builtin_bswap64(word);
        /* No 0xFF byte in the word: no stuffing or marker to handle, take whole bytes. */
        uint64_t inverse = ~word;
        if (((inverse - 0x0101010101010101ull) & ~inverse & 0x8080808080808080ull) == 0) {
            int take = (64 - b->count) >> 3;
            uint64_t top = word & (~0ull << (64 - 8 * take));
            b->buffer |= top >> b->count;
            b->next += take;
            b->count += 8 * take;
            return;
        }
    }
    /* Through a copy, so that the caller's reader never has its address taken and stays in
     * registers. */
    struct bits copy = *b;
    refill_slowly(cinfo, &copy);
    *b = copy;
}

static inline void drop(struct bits *b, int n) {
    b->buffer <<= n;
    b->count -= n;
}

/* A symbol whose code is longer than FAST_BITS. */
static int decode_long(j_decompress_ptr cinfo, struct bits *b, const struct table *t) {
    for (int len = FAST_BITS + 1; len <= 16; len++) {
        int32_t code = (int32_t)(b->buffer >> (64 - len));
        if (code <= t->max_code[len]) {
            drop(b, len);
            return t->value[(code + t->offset[len]) & 0xFF];
        }
    }
    /* No code of up to 16 bits matches: libjpeg warns and decodes a zero. */
    WARNMS(cinfo, JWRN_HUFF_BAD_CODE);
    drop(b, 16);
    return 0;
}

/* decode_long through a copy of the reader (see refill). */
static inline int decode_long_copy(j_decompress_ptr cinfo, struct bits *b,
                                   const struct table *t) {
    struct bits copy = *b;
    int symbol = decode_long(cinfo, &copy, t);
    *b = copy;
    return symbol;
}

/* The next symbol of DC table `t`; at least 32 bits are in the buffer. */
static inline int decode_dc(j_decompress_ptr cinfo, struct bits *b, const struct table *t) {
    int32_t entry = t->fast[b->buffer >> (64 - FAST_BITS)];
    if (entry == 0) {
        return decode_long_copy(cinfo, b, t);
    }
    drop(b, entry & 0x1F);
    return entry >> 8;
}

/* `s` (1..15) extra bits as a signed value. */
static inline int receive(struct bits *b, int s) {
    uint32_t v = (uint32_t)(b->buffer >> (64 - s));
    drop(b, s);
    return extend(v, s);
}

static boolean decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
    struct entropy *e = (struct entropy *)cinfo->entropy;
    /* After the data stopped at a marker, the rest of the image stays zero (grey), as libjpeg
     * leaves it. */
    if (e->pub.insufficient_data) {
        return TRUE;
    }
    struct bits b = e->bits;
    JCOEF scratch[DCTSIZE2];
    for (int blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
        /* Decoded coefficients nobody wants (skipped rows, unneeded components, the ACs of a
         * 1/8-scale decode) go to `scratch`. The caller has zeroed the blocks it passes. */
        JCOEF *block = MCU_data != NULL ? MCU_data[blkn][0] : scratch;
        refill(cinfo, &b);
        int s = decode_dc(cinfo, &b, e->dc[blkn]);
        int dc = s ? receive(&b, s) : 0;
        if (e->dc_needed[blkn]) {
            int ci = e->component[blkn];
            /* Wraps like libjpeg's on malformed files with ever-growing differences. */
            dc = (int)((unsigned)dc + (unsigned)e->last_dc[ci]);
            e->last_dc[ci] = dc;
            block[0] = (JCOEF)dc;
        }
        if (!e->ac_needed[blkn]) {
            block = scratch;
        }
        const struct table *ac = e->ac[blkn];
        for (int k = 1; k < DCTSIZE2; k++) {
            refill(cinfo, &b);
            int32_t entry = ac->fast[b.buffer >> (64 - FAST_BITS)];
            if (entry & WHOLE) {
                drop(&b, entry & 0x1F);
                k += (entry >> 8) & 0xF;
                block[natural_order[k]] = (JCOEF)(entry >> 16);
                continue;
            }
            int symbol;
            if (entry != 0) {
                drop(&b, entry & 0x1F);
                symbol = entry >> 8;
            } else {
                symbol = decode_long_copy(cinfo, &b, ac);
            }
            int run = symbol >> 4, size = symbol & 15;
            if (size != 0) {
                k += run;
                block[natural_order[k]] = (JCOEF)receive(&b, size);
            } else if (run == 15) {
                k += 15; /* ZRL: sixteen zeros */
            } else {
                break; /* EOB */
            }
        }
    }
    e->bits = b;
    cinfo->src->next_input_byte = b.next;
    cinfo->src->bytes_in_buffer = (size_t)(b.end - b.next);
    if (b.count < b.padding) {
        /* This MCU read bits the data did not have. */
        if (b.at_end_of_file) {
            WARNMS(cinfo, JWRN_JPEG_EOF);
        }
        WARNMS(cinfo, JWRN_HIT_MARKER);
        e->pub.insufficient_data = TRUE;
    }
    return TRUE;
}

static void reset(j_decompress_ptr cinfo, struct entropy *e) {
    memset(&e->bits, 0, sizeof e->bits);
    e->bits.next = cinfo->src->next_input_byte;
    e->bits.end = e->bits.next + cinfo->src->bytes_in_buffer;
    memset(e->last_dc, 0, sizeof e->last_dc);
    e->pub.insufficient_data = FALSE;
}

static void start_pass(j_decompress_ptr cinfo) {
    reset(cinfo, (struct entropy *)cinfo->entropy);
}

int hetgen_huffman_install(j_decompress_ptr cinfo) {
    if (cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8 ||
        cinfo->restart_interval != 0 || jpeg_has_multiple_scans(cinfo) || cinfo->Ss != 0 ||
        cinfo->Se != DCTSIZE2 - 1 || cinfo->Ah != 0 || cinfo->Al != 0 ||
        cinfo->unread_marker != 0 || cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU ||
        cinfo->comps_in_scan > MAX_COMPS_IN_SCAN) {
        return 0;
    }
    struct entropy *e = (*cinfo->mem->alloc_small)((j_common_ptr)cinfo, JPOOL_IMAGE, sizeof *e);
    /* One table per DHT slot a component of the scan uses, DC slots first. */
    struct table *built[2 * NUM_HUFF_TBLS] = {0};
    for (int ci = 0; ci < cinfo->comps_in_scan; ci++) {
        const jpeg_component_info *comp = cinfo->cur_comp_info[ci];
        int slots[2] = {comp->dc_tbl_no, NUM_HUFF_TBLS + comp->ac_tbl_no};
        for (int i = 0; i < 2; i++) {
            int slot = slots[i];
            if (slot < 0 || slot >= 2 * NUM_HUFF_TBLS || (i == 0 && slot >= NUM_HUFF_TBLS)) {
                return 0;
            }
            if (built[slot] != NULL) {
                continue;
            }
            const JHUFF_TBL *h = i == 0 ? cinfo->dc_huff_tbl_ptrs[slot]
                                        : cinfo->ac_huff_tbl_ptrs[slot - NUM_HUFF_TBLS];
            if (h == NULL) {
                return 0;
            }
            struct table *t =
                (*cinfo->mem->alloc_small)((j_common_ptr)cinfo, JPOOL_IMAGE, sizeof *t);
            if (!build_table(t, h, i == 1)) {
                return 0;
            }
            built[slot] = t;
        }
    }
    for (int blkn = 0; blkn < cinfo->blocks_in_MCU; blkn++) {
        int ci = cinfo->MCU_membership[blkn];
        const jpeg_component_info *comp = cinfo->cur_comp_info[ci];
        e->component[blkn] = ci;
        e->dc[blkn] = built[comp->dc_tbl_no];
        e->ac[blkn] = built[NUM_HUFF_TBLS + comp->ac_tbl_no];
        e->dc_needed[blkn] = comp->component_needed;
#if JPEG_LIB_VERSION >= 70
        e->ac_needed[blkn] = comp->component_needed && comp->DCT_h_scaled_size > 1;
#else
        e->ac_needed[blkn] = comp->component_needed && comp->DCT_scaled_size > 1;
#endif
    }
    e->pub.start_pass = start_pass;
    e->pub.decode_mcu = decode_mcu;
    reset(cinfo, e);
    cinfo->entropy = &e->pub;
    return 1;
}
