/* JSON for the rabbitmq-c adapter (conformance/drivers/c/adapter.c): a small reader and writer.
 *
 * Responsibility: parse one request line into a tree (`jv`), and build reply and event lines in a
 * growable buffer (`sb`), bytes as {"$b64": "..."} (the adapter protocol's encoding,
 * conformance/drivers/wire_json.py). Header-only, static functions, no library beyond libc: the
 * adapter builds with one gcc command and the Debian package librabbitmq-dev.
 *
 * Rules: every value of a request lives in one arena, freed after its reply; the parser never
 * reads past the line and reports a malformed line as NULL (the adapter answers it with an error);
 * integers keep 64 bits (a header of 2**40 survives), strings keep embedded NULs (length-counted).
 */
#ifndef AMQPC_JSON_LINES_H
#define AMQPC_JSON_LINES_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -- arena ------------------------------------------------------------------------------------ */
typedef struct arena_block { struct arena_block *next; size_t used, size; char data[]; } arena_block;
typedef struct { arena_block *head; } arena;

static void *arena_alloc(arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (a->head == NULL || a->head->used + n > a->head->size) {
    size_t size = n > 65536 ? n : 65536;
    arena_block *b = malloc(sizeof(arena_block) + size);
    if (b == NULL) { fputs("adapter: out of memory\n", stderr); exit(70); }
    b->next = a->head; b->used = 0; b->size = size; a->head = b;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += n;
  return p;
}

static void arena_free(arena *a) {
  while (a->head) { arena_block *next = a->head->next; free(a->head); a->head = next; }
}

/* -- values ----------------------------------------------------------------------------------- */
typedef enum { J_NULL, J_BOOL, J_INT, J_DOUBLE, J_STR, J_BYTES, J_ARR, J_OBJ } jtype;
typedef struct jv {
  jtype t;
  int64_t i;           /* J_BOOL (0/1), J_INT */
  double d;            /* J_DOUBLE */
  char *s; size_t len; /* J_STR, J_BYTES (decoded), NUL-terminated as well */
  struct jv *items;    /* J_ARR, J_OBJ values */
  char **keys;         /* J_OBJ */
  size_t n;
} jv;

static const jv JNULL = {J_NULL, 0, 0, NULL, 0, NULL, NULL, 0};

static const jv *jget(const jv *obj, const char *key) {
  if (obj == NULL || obj->t != J_OBJ) return &JNULL;
  for (size_t k = 0; k < obj->n; k++) if (strcmp(obj->keys[k], key) == 0) return &obj->items[k];
  return &JNULL;
}

static int jbool(const jv *v) { return v->t == J_BOOL || v->t == J_INT ? v->i != 0 : 0; }
static int64_t jint(const jv *v, int64_t dflt) {
  return v->t == J_INT ? v->i : v->t == J_DOUBLE ? (int64_t)v->d : dflt;
}
static const char *jstr(const jv *v) { return v->t == J_STR ? v->s : ""; }

/* -- base64 ------------------------------------------------------------------------------------ */
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(char c) {
  const char *p = c ? strchr(B64, c) : NULL;
  return p ? (int)(p - B64) : -1;
}

static size_t b64_decode(const char *in, size_t n, char *out) {
  size_t o = 0; unsigned acc = 0; int bits = 0;
  for (size_t k = 0; k < n; k++) {
    int v = b64_value(in[k]);
    if (v < 0) continue; /* '=' padding */
    acc = (acc << 6) | (unsigned)v; bits += 6;
    if (bits >= 8) { bits -= 8; out[o++] = (char)((acc >> bits) & 0xff); }
  }
  return o;
}

/* -- parser ------------------------------------------------------------------------------------ */
typedef struct { const char *p, *end; arena *a; int depth; } jparser;

static void jskip(jparser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r' || *ps->p == '\n')) ps->p++;
}

static int hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    char c = p[k]; v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
}

static size_t utf8_put(char *o, unsigned cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

static int jparse_string(jparser *ps, char **out, size_t *len) {
  if (ps->p >= ps->end || *ps->p != '"') return 0;
  const char *close = ++ps->p; /* the closing quote bounds the decoded length */
  while (close < ps->end && *close != '"') close += *close == '\\' ? 2 : 1;
  char *buf = arena_alloc(ps->a, (size_t)(close - ps->p) + 1), *o = buf;
  while (ps->p < ps->end && *ps->p != '"') {
    char c = *ps->p++;
    if (c != '\\') { *o++ = c; continue; }
    if (ps->p >= ps->end) return 0;
    c = *ps->p++;
    switch (c) {
      case 'n': *o++ = '\n'; break;
      case 't': *o++ = '\t'; break;
      case 'r': *o++ = '\r'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'u': {
        unsigned cp, lo;
        if (ps->end - ps->p < 4 || !hex4(ps->p, &cp)) return 0;
        ps->p += 4;
        if (cp >= 0xd800 && cp < 0xdc00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u'
            && hex4(ps->p + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          ps->p += 6;
        }
        o += utf8_put(o, cp);
        break;
      }
      default: *o++ = c; /* \" \\ \/ */
    }
  }
  if (ps->p >= ps->end) return 0;
  ps->p++;
  *o = '\0';
  *out = buf; *len = (size_t)(o - buf);
  return 1;
}

static int jparse_value(jparser *ps, jv *v);

static int jparse_container(jparser *ps, jv *v, char close) {
  size_t cap = 8;
  v->items = arena_alloc(ps->a, cap * sizeof(jv));
  v->keys = close == '}' ? arena_alloc(ps->a, cap * sizeof(char *)) : NULL;
  v->n = 0;
  ps->p++;
  jskip(ps);
  if (ps->p < ps->end && *ps->p == close) { ps->p++; return 1; }
  for (;;) {
    if (v->n == cap) {
      jv *items = arena_alloc(ps->a, 2 * cap * sizeof(jv));
      memcpy(items, v->items, cap * sizeof(jv)); v->items = items;
      if (v->keys) { char **keys = arena_alloc(ps->a, 2 * cap * sizeof(char *));
        memcpy(keys, v->keys, cap * sizeof(char *)); v->keys = keys; }
      cap *= 2;
    }
    jskip(ps);
    if (close == '}') {
      size_t klen;
      if (!jparse_string(ps, &v->keys[v->n], &klen)) return 0;
      jskip(ps);
      if (ps->p >= ps->end || *ps->p++ != ':') return 0;
    }
    if (!jparse_value(ps, &v->items[v->n])) return 0;
    v->n++;
    jskip(ps);
    if (ps->p >= ps->end) return 0;
    if (*ps->p == ',') { ps->p++; continue; }
    if (*ps->p == close) { ps->p++; return 1; }
    return 0;
  }
}

static int jparse_value(jparser *ps, jv *v) {
  *v = JNULL;
  jskip(ps);
  if (ps->p >= ps->end || ++ps->depth > 64) return 0;
  int ok = 1;
  char c = *ps->p;
  if (c == '"') { v->t = J_STR; ok = jparse_string(ps, &v->s, &v->len); }
  else if (c == '{') {
    v->t = J_OBJ; ok = jparse_container(ps, v, '}');
    const jv *b = jget(v, "$b64");
    if (ok && v->n == 1 && b->t == J_STR) { /* bytes */
      char *raw = arena_alloc(ps->a, b->len + 1);
      v->len = b64_decode(b->s, b->len, raw); raw[v->len] = '\0';
      v->t = J_BYTES; v->s = raw; v->n = 0;
    }
  } else if (c == '[') { v->t = J_ARR; ok = jparse_container(ps, v, ']'); }
  else if (ps->end - ps->p >= 4 && strncmp(ps->p, "true", 4) == 0) { v->t = J_BOOL; v->i = 1; ps->p += 4; }
  else if (ps->end - ps->p >= 5 && strncmp(ps->p, "false", 5) == 0) { v->t = J_BOOL; ps->p += 5; }
  else if (ps->end - ps->p >= 4 && strncmp(ps->p, "null", 4) == 0) { ps->p += 4; }
  else {
    const char *s = ps->p; int real = 0;
    while (ps->p < ps->end && strchr("+-0123456789.eE", *ps->p)) { if (strchr(".eE", *ps->p)) real = 1; ps->p++; }
    if (ps->p == s) return 0;
    char num[64]; size_t n = (size_t)(ps->p - s) < 63 ? (size_t)(ps->p - s) : 63;
    memcpy(num, s, n); num[n] = '\0';
    if (real) { v->t = J_DOUBLE; v->d = strtod(num, NULL); } else { v->t = J_INT; v->i = strtoll(num, NULL, 10); }
  }
  ps->depth--;
  return ok;
}

/* The request line as a tree in `a`, or NULL when it is not one JSON object. */
static jv *jparse(arena *a, const char *line, size_t len) {
  jparser ps = {line, line + len, a, 0};
  jv *v = arena_alloc(a, sizeof(jv));
  if (!jparse_value(&ps, v) || v->t != J_OBJ) return NULL;
  jskip(&ps);
  return ps.p == ps.end ? v : NULL;
}

/* -- writer ------------------------------------------------------------------------------------ */
typedef struct { char *s; size_t len, cap; } sb;

static void sb_raw(sb *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    b->cap = (b->len + n + 1) * 2;
    b->s = realloc(b->s, b->cap);
    if (b->s == NULL) { fputs("adapter: out of memory\n", stderr); exit(70); }
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

static void sb_put(sb *b, const char *s) { sb_raw(b, s, strlen(s)); }

static void sb_fmt(sb *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sb_raw(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string of `n` octets (UTF-8 passed through, control characters escaped). */
static void sb_str(sb *b, const char *s, size_t n) {
  sb_raw(b, "\"", 1);
  for (size_t k = 0; k < n; k++) {
    unsigned char c = (unsigned char)s[k];
    if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; sb_raw(b, e, 2); }
    else if (c < 0x20) sb_fmt(b, "\\u%04x", c);
    else sb_raw(b, (const char *)&c, 1);
  }
  sb_raw(b, "\"", 1);
}

static void sb_bytes(sb *b, const void *data, size_t n) {
  const unsigned char *p = data;
  sb_put(b, "{\"$b64\":\"");
  for (size_t k = 0; k < n; k += 3) {
    unsigned v = (unsigned)p[k] << 16 | (k + 1 < n ? (unsigned)p[k + 1] << 8 : 0) | (k + 2 < n ? p[k + 2] : 0);
    char q[4] = {B64[(v >> 18) & 63], B64[(v >> 12) & 63], k + 1 < n ? B64[(v >> 6) & 63] : '=',
                 k + 2 < n ? B64[v & 63] : '='};
    sb_raw(b, q, 4);
  }
  sb_put(b, "\"}");
}

#endif
