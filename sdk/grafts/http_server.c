/* http_server.c -- a static HTTP/1.1 server inside the kernel (event.net.packet; the thesis'
 * example of a server woken by a connection, 3.5 and 4.2, made real). Serves files under
 * `http_root` (default "/www"; its owner may write another there) with keep-alive, pipelining,
 * single byte ranges (206, 416), HEAD, and 403/404 from the serving process's own permissions:
 * the kernel answers vino_net_stat as that process, and sends a file's bytes from the page
 * cache after the call, so a miss never waits for the device inside the graft's transaction.
 * What it knows of each connection (its unparsed bytes) is kept here, by connection id. */
#define VINO_NET_ARGS
#include "vino_graft.h"

#define CONNS 256
#define REQ_MAX 4096
#define ROOT_MAX 256

struct conn {
    int32_t id; /* 0: free */
    uint32_t used;
    char buf[REQ_MAX];
};

static struct conn conns[CONNS];
VINO_SHARED char http_root[ROOT_MAX] = "/www";

/* ---- small helpers (no libc) ---- */

/* Unaligned 8-byte words: a call's stores are logged for its rollback one store at a time, so
 * bytes are moved eight at a time. */
typedef uint64_t __attribute__((aligned(1))) word_u;

static void copy(char *dst, const char *src, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        *(word_u *)(dst + i) = *(const word_u *)(src + i);
    for (; i < n; i++)
        dst[i] = src[i];
}

static uint32_t cstrlen(const char *s) {
    uint32_t n = 0;
    while (s[n])
        n++;
    return n;
}

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

/* Whether s[0..n) starts with lit, letters in any case. */
static bool starts(const char *s, uint32_t n, const char *lit) {
    uint32_t i = 0;
    for (; lit[i]; i++)
        if (i >= n || lower(s[i]) != lower(lit[i]))
            return false;
    return true;
}

static bool same(const char *s, uint32_t n, const char *lit) { return n == cstrlen(lit) && starts(s, n, lit); }

/* Where the first "\r\n\r\n" ends, or -1. */
static int32_t head_end(const char *b, uint32_t n) {
    for (uint32_t i = 3; i < n; i++)
        if (b[i - 3] == '\r' && b[i - 2] == '\n' && b[i - 1] == '\r' && b[i] == '\n')
            return (int32_t)i + 1;
    return -1;
}

/* A decimal number at s[*i..n); false if there is none or it overflows. */
static bool number(const char *s, uint32_t n, uint32_t *i, uint64_t *out) {
    uint64_t v = 0;
    uint32_t start = *i;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(s[*i] - '0');
        (*i)++;
    }
    *out = v;
    return *i > start;
}

/* ---- the response, written into the output region ---- */

struct out {
    char *buf;
    uint32_t used;
    struct vino_net_action *act;
    uint32_t acts;
};

static void put(struct out *o, const char *s, uint32_t n) {
    for (uint32_t i = 0; i < n && o->used < VINO_NET_OUT; i++)
        o->buf[o->used++] = s[i];
}

static void puts_(struct out *o, const char *s) { put(o, s, cstrlen(s)); }

static void putu(struct out *o, uint64_t v) {
    char d[20];
    int n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        put(o, &d[--n], 1);
}

static void action(struct out *o, uint32_t kind, uint32_t a, uint32_t b, uint64_t offset, uint64_t len) {
    struct vino_net_action *x = &o->act[o->acts++];
    x->kind = kind;
    x->a = a;
    x->b = b;
    x->reserved = 0;
    x->offset = offset;
    x->len = len;
}

/* A response with a short body of its own. */
static void plain(struct out *o, const char *status, const char *body, bool close, const char *extra) {
    uint32_t at = o->used;
    puts_(o, "HTTP/1.1 ");
    puts_(o, status);
    puts_(o, "\r\nContent-Type: text/plain\r\nContent-Length: ");
    putu(o, cstrlen(body));
    puts_(o, "\r\n");
    if (extra)
        puts_(o, extra);
    if (close)
        puts_(o, "Connection: close\r\n");
    puts_(o, "\r\n");
    puts_(o, body);
    action(o, VINO_NET_SEND, at, o->used - at, 0, 0);
    if (close)
        action(o, VINO_NET_CLOSE_AFTER, 0, 0, 0, 0);
}

/* ---- one request ---- */

/* Answers the request in b[0..n) (its head, up to the blank line). Returns false if the
 * connection closes after it. */
static bool answer(struct out *o, const char *b, uint32_t n) {
    /* The request line: METHOD SP TARGET SP VERSION CRLF. */
    uint32_t i = 0, m_end, t_start, t_end, v_start, v_end;
    while (i < n && b[i] != ' ')
        i++;
    m_end = i++;
    t_start = i;
    while (i < n && b[i] != ' ')
        i++;
    t_end = i++;
    v_start = i;
    while (i < n && b[i] != '\r')
        i++;
    v_end = i;
    if (t_end >= n || v_end >= n || t_start == t_end) {
        plain(o, "400 Bad Request", "bad request\n", true, NULL);
        return false;
    }
    bool http11 = same(b + v_start, v_end - v_start, "HTTP/1.1");
    if (!http11 && !same(b + v_start, v_end - v_start, "HTTP/1.0")) {
        plain(o, "505 HTTP Version Not Supported", "HTTP/1.0 or 1.1\n", true, NULL);
        return false;
    }
    bool head = same(b, m_end, "HEAD");
    if (!head && !same(b, m_end, "GET")) {
        plain(o, "501 Not Implemented", "GET and HEAD only\n", true, NULL);
        return false;
    }
    /* Headers: Connection and Range. */
    bool keep = http11, ranged = false, suffix = false;
    uint64_t first = 0, last = UINT64_MAX;
    for (i = v_end + 2; i + 1 < n;) {
        uint32_t end = i;
        while (end < n && b[end] != '\r')
            end++;
        const char *h = b + i;
        uint32_t hn = end - i;
        if (starts(h, hn, "connection:")) {
            uint32_t k = 11;
            while (k < hn && h[k] == ' ')
                k++;
            if (starts(h + k, hn - k, "close"))
                keep = false;
            else if (starts(h + k, hn - k, "keep-alive"))
                keep = true;
        } else if (starts(h, hn, "range:")) {
            uint32_t k = 6;
            while (k < hn && h[k] == ' ')
                k++;
            if (starts(h + k, hn - k, "bytes=")) {
                k += 6;
                if (k < hn && h[k] == '-') {
                    k++;
                    suffix = number(h, hn, &k, &last);
                    ranged = suffix && k == hn;
                } else if (number(h, hn, &k, &first) && k < hn && h[k] == '-') {
                    k++;
                    ranged = k == hn || (number(h, hn, &k, &last) && k == hn && last >= first);
                }
            }
        }
        i = end + 2;
    }
    /* The path under the root: no "..", a directory's index.html. */
    uint32_t t_len = t_end - t_start;
    for (uint32_t k = 0; k < t_len; k++)
        if (b[t_start + k] == '?') {
            t_len = k;
            break;
        }
    const char *t = b + t_start;
    for (uint32_t k = 0; k + 1 < t_len; k++)
        if (t[k] == '.' && t[k + 1] == '.' && (k == 0 || t[k - 1] == '/') && (k + 2 == t_len || t[k + 2] == '/')) {
            plain(o, "403 Forbidden", "forbidden\n", !keep, NULL);
            return keep;
        }
    if (t[0] != '/') {
        plain(o, "400 Bad Request", "bad request\n", true, NULL);
        return false;
    }
    uint32_t path_at = o->used;
    puts_(o, http_root);
    put(o, t, t_len);
    if (t[t_len - 1] == '/')
        puts_(o, "index.html");
    uint32_t path_len = o->used - path_at;
    int64_t size = vino_net_stat(o->buf + path_at, (int32_t)path_len);
    if (size < 0) {
        o->used = path_at;
        if (size == -13)
            plain(o, "403 Forbidden", "forbidden\n", !keep, NULL);
        else
            plain(o, "404 Not Found", "not found\n", !keep, NULL);
        return keep;
    }
    uint64_t total = (uint64_t)size, offset = 0, len = total;
    if (ranged) {
        if (suffix) {
            len = last < total ? last : total;
            offset = total - len;
        } else if (first >= total) {
            o->used = path_at;
            char extra[64];
            struct out e = {extra, 0, NULL, 0};
            puts_(&e, "Content-Range: bytes */");
            putu(&e, total);
            puts_(&e, "\r\n");
            extra[e.used] = 0;
            plain(o, "416 Range Not Satisfiable", "", !keep, extra);
            return keep;
        } else {
            offset = first;
            len = (last >= total ? total - 1 : last) - first + 1;
        }
        if (len == 0)
            ranged = false;
    }
    uint32_t head_at = o->used;
    puts_(o, ranged ? "HTTP/1.1 206 Partial Content\r\n" : "HTTP/1.1 200 OK\r\n");
    puts_(o, "Content-Type: application/octet-stream\r\nContent-Length: ");
    putu(o, len);
    puts_(o, "\r\n");
    if (ranged) {
        puts_(o, "Content-Range: bytes ");
        putu(o, offset);
        puts_(o, "-");
        putu(o, offset + len - 1);
        puts_(o, "/");
        putu(o, total);
        puts_(o, "\r\n");
    }
    if (!keep)
        puts_(o, "Connection: close\r\n");
    puts_(o, "\r\n");
    action(o, VINO_NET_SEND, head_at, o->used - head_at, 0, 0);
    if (!head && len > 0)
        action(o, VINO_NET_FILE, path_at, path_len, offset, len);
    if (!keep)
        action(o, VINO_NET_CLOSE_AFTER, 0, 0, 0, 0);
    return keep;
}

/* ---- connections ---- */

static struct conn *find(int32_t id, bool make) {
    struct conn *free_slot = NULL;
    for (int i = 0; i < CONNS; i++) {
        if (conns[i].id == id)
            return &conns[i];
        if (conns[i].id == 0 && free_slot == NULL)
            free_slot = &conns[i];
    }
    if (make && free_slot) {
        free_slot->id = id;
        free_slot->used = 0;
    }
    return make ? free_slot : NULL;
}

VINO_GRAFT(event_net_packet) int32_t event_net_packet(int32_t event, int32_t id, int32_t len) {
    if (event == VINO_NET_CONNECT)
        return find(id, true) ? 0 : -1; /* full: refused */
    struct conn *c = find(id, false);
    if (event == VINO_NET_CLOSE) {
        if (c)
            c->id = 0;
        return 0;
    }
    if (c == NULL)
        return -1;
    if (len < 0 || (uint32_t)len > REQ_MAX - c->used)
        return -1; /* a head longer than 4 KiB */
    copy(c->buf + c->used, (const char *)vino_net_in(), (uint32_t)len);
    c->used += (uint32_t)len;
    struct out o = {vino_net_out(), 0, vino_net_actions(), 0};
    bool more = false;
    for (;;) {
        int32_t end = head_end(c->buf, c->used);
        if (end < 0)
            break;
        /* Room for one more answer: a head, its path, three actions. */
        if (o.acts + 3 > VINO_NET_ACTIONS || o.used + 512 + ROOT_MAX + REQ_MAX > VINO_NET_OUT) {
            more = true;
            break;
        }
        bool keep = answer(&o, c->buf, (uint32_t)end);
        /* Forward, so an overlapping move reads each word before it is overwritten. */
        copy(c->buf, c->buf + end, c->used - (uint32_t)end);
        c->used -= (uint32_t)end;
        if (!keep) {
            c->used = 0;
            break;
        }
    }
    return (int32_t)o.acts | (more ? VINO_NET_AGAIN : 0);
}
