/*
 * Region-of-interest JPEG decoding through libjpeg-turbo's libjpeg API.
 *
 * A random crop of a training image needs only part of it, often at a lower resolution than
 * the file's. libjpeg-turbo can skip the work for everything else: DCT-domain scaling
 * (scale_num / 8) runs a smaller inverse DCT per block, jpeg_crop_scanline() limits the IDCT,
 * upsampling and colour conversion to the crop's columns, jpeg_skip_scanlines() entropy-decodes
 * the rows above the crop without reconstructing them, and decoding stops after the crop's last
 * row. The Rust side (src/codec/jpeg.rs) owns all policy; this file only drives libjpeg and
 * turns its longjmp-style errors into return codes, so no libjpeg error ever unwinds through
 * Rust frames.
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

/*
 * `jump` and `message` belong to the call in progress (hetgen_jpeg_open or hetgen_jpeg_decode):
 * `armed` says one is, and each clears it before returning, so the jump target is never a frame
 * that has returned.
 */
struct hetgen_error {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    int armed;
    char *message;
    size_t message_len;
};

static void on_error(j_common_ptr cinfo) {
    struct hetgen_error *err = (struct hetgen_error *)cinfo->err;
    if (!err->armed) {
        /* libjpeg failed outside a call of ours: nothing to return to, and a bug here. */
        abort();
    }
    char text[JMSG_LENGTH_MAX];
    err->mgr.format_message(cinfo, text);
    snprintf(err->message, err->message_len, "%s", text);
    err->armed = 0;
    longjmp(err->jump, 1);
}

static void arm(struct hetgen_error *err, char *message, size_t message_len) {
    err->message = message;
    err->message_len = message_len;
    message[0] = 0;
    err->armed = 1;
}

static void disarm(struct hetgen_error *err) {
    err->armed = 0;
    err->message = NULL;
    err->message_len = 0;
}

/*
 * Warnings are not printed (libjpeg's default writes them to stderr). Most are harmless
 * (extraneous bytes, odd markers), but a file that ends early would come out with grey rows:
 * that one is an error, as PIL makes it.
 */
static void on_warning(j_common_ptr cinfo, int level) {
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
        on_error(cinfo);
    }
}

/*
 * One file's decoder, kept from the header read to the decode, so the headers are parsed once
 * and the caller can choose the region from the image's dimensions in between.
 */
struct hetgen_jpeg {
    struct jpeg_decompress_struct cinfo;
    struct hetgen_error err;
};

/* Frees the decoder, in whatever state an error left it. */
void hetgen_jpeg_close(struct hetgen_jpeg *jpeg) {
    if (jpeg != NULL) {
        jpeg_destroy_decompress(&jpeg->cinfo);
        free(jpeg);
    }
}

/*
 * Reads the headers of the file in `data` (which must outlive the decoder) and returns a
 * decoder with the image's dimensions in `width` and `height`, or NULL with `message` set.
 */
struct hetgen_jpeg *hetgen_jpeg_open(const uint8_t *data, size_t len, uint32_t *width,
                                     uint32_t *height, char *message, size_t message_len) {
    struct hetgen_jpeg *volatile jpeg = calloc(1, sizeof *jpeg);
    if (jpeg == NULL) {
        snprintf(message, message_len, "out of memory");
        return NULL;
    }
    jpeg->cinfo.err = jpeg_std_error(&jpeg->err.mgr);
    jpeg->err.mgr.error_exit = on_error;
    jpeg->err.mgr.emit_message = on_warning;
    arm(&jpeg->err, message, message_len);
    if (setjmp(jpeg->err.jump)) {
        hetgen_jpeg_close(jpeg);
        return NULL;
    }
    jpeg_create_decompress(&jpeg->cinfo);
    jpeg_mem_src(&jpeg->cinfo, data, (unsigned long)len);
    jpeg_read_header(&jpeg->cinfo, TRUE);
    *width = jpeg->cinfo.image_width;
    *height = jpeg->cinfo.image_height;
    disarm(&jpeg->err);
    return jpeg;
}

/* The output size of an image of `size` pixels at scale `num / 8`, as libjpeg computes it. */
uint32_t hetgen_jpeg_scaled(uint32_t size, uint32_t num) {
    return (uint32_t)(((uint64_t)size * num + 7) / 8);
}

/*
 * Decode rows [top, top + rows) and at least columns [left, left + cols) of the image scaled
 * by `scale_num / 8` (1..=8), all in scaled pixels, into `out` (`rows` rows of
 * `*out_cols * channels` bytes, tightly packed). libjpeg widens the column range to whole
 * blocks: `*out_left` and `*out_cols` say which columns were written. `out_len` must hold
 * `rows * scaled width * channels`. `channels` is 1 (luma) or 3 (RGB); CMYK files are turned
 * into RGB here, since libjpeg does not convert them itself. Returns 0, or -1 with `message`.
 * A decoder decodes once; close it after, whatever this returned.
 */
static int decode_region(struct hetgen_jpeg *jpeg, uint32_t channels, uint32_t scale_num,
                         uint32_t top, uint32_t rows, uint32_t left, uint32_t cols, uint8_t *out,
                         size_t out_len, uint32_t *out_left, uint32_t *out_cols, char *message,
                         size_t message_len) {
    struct jpeg_decompress_struct *const cinfo = &jpeg->cinfo;
    /* `volatile`: read after a longjmp back into this frame. */
    JSAMPLE *volatile cmyk = NULL;
    arm(&jpeg->err, message, message_len);
    if (setjmp(jpeg->err.jump)) {
        free(cmyk);
        return -1;
    }
    int is_cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    if (is_cmyk) {
        cinfo->out_color_space = JCS_CMYK;
    } else {
        cinfo->out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    }
    cinfo->scale_num = scale_num;
    cinfo->scale_denom = 8;
    jpeg_start_decompress(cinfo);
    if (rows == 0 || cols == 0 || top + rows > cinfo->output_height ||
        left + cols > cinfo->output_width) {
        snprintf(message, message_len,
                 "region %ux%u at (%u, %u) is outside the %ux%u image at scale %u/8", cols, rows,
                 left, top, cinfo->output_width, cinfo->output_height, scale_num);
        return -1;
    }
    if ((size_t)rows * cinfo->output_width * channels > out_len) {
        snprintf(message, message_len, "output buffer too small");
        return -1;
    }
    JDIMENSION x = left, w = cols;
    if (left > 0 || cols < cinfo->output_width) {
        jpeg_crop_scanline(cinfo, &x, &w);
    }
    if (top > 0) {
        jpeg_skip_scanlines(cinfo, top);
    }
    size_t stride = (size_t)w * channels;
    if (is_cmyk) {
        cmyk = malloc((size_t)w * 4);
        if (cmyk == NULL) {
            snprintf(message, message_len, "out of memory");
            return -1;
        }
    }
    if (!is_cmyk) {
        /* Straight into `out`, as many rows per call as libjpeg will give. */
        JSAMPROW pointers[64];
        uint32_t done = 0;
        while (done < rows) {
            uint32_t want = rows - done < 64 ? rows - done : 64;
            for (uint32_t i = 0; i < want; i++) {
                pointers[i] = out + (size_t)(done + i) * stride;
            }
            JDIMENSION got = jpeg_read_scanlines(cinfo, pointers, want);
            if (got == 0) {
                snprintf(message, message_len, "JPEG data ended at row %u", top + done);
                return -1;
            }
            done += got;
        }
    }
    for (uint32_t r = 0; is_cmyk && r < rows; r++) {
        uint8_t *dst = out + r * stride;
        JSAMPROW row = cmyk;
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
            snprintf(message, message_len, "JPEG data ended at row %u", top + r);
            free(cmyk);
            return -1;
        }
        /* Adobe (Photoshop) CMYK JPEGs store inverted inks: value = 255 - ink. */
        int inverted = cinfo->saw_Adobe_marker;
        for (JDIMENSION i = 0; i < w; i++) {
            unsigned c = cmyk[4 * i], m = cmyk[4 * i + 1], y = cmyk[4 * i + 2], k = cmyk[4 * i + 3];
            if (!inverted) {
                c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
            }
            unsigned r8 = (c * k + 127) / 255, g8 = (m * k + 127) / 255, b8 = (y * k + 127) / 255;
            if (channels == 1) {
                dst[i] = (uint8_t)((r8 * 299 + g8 * 587 + b8 * 114 + 500) / 1000);
            } else {
                dst[3 * i] = (uint8_t)r8, dst[3 * i + 1] = (uint8_t)g8, dst[3 * i + 2] = (uint8_t)b8;
            }
        }
    }
    *out_left = x;
    *out_cols = w;
    /* The rows below the region are never decoded. */
    jpeg_abort_decompress(cinfo);
    free(cmyk);
    return 0;
}

/* decode_region, with the error handler disarmed however it returned. */
int hetgen_jpeg_decode(struct hetgen_jpeg *jpeg, uint32_t channels, uint32_t scale_num,
                       uint32_t top, uint32_t rows, uint32_t left, uint32_t cols, uint8_t *out,
                       size_t out_len, uint32_t *out_left, uint32_t *out_cols, char *message,
                       size_t message_len) {
    int result = decode_region(jpeg, channels, scale_num, top, rows, left, cols, out, out_len,
                               out_left, out_cols, message, message_len);
    disarm(&jpeg->err);
    return result;
}
