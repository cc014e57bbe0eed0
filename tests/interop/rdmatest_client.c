/*
 * An independent RDMATEST client: rpcgen stubs (from rdmatest.x) over
 * libtirpc's TCP client (clnttcp_create: RFC 5531 record marking).
 *
 *   rdmatest_client HOST PORT MAX_DATA SENDSZ
 *
 * Calls NULL, ECHO, PUT, GET (including one above MAX_DATA, which must
 * answer status 1), GET2 and SLEEP on the server at HOST:PORT, checks every
 * byte, and exits 0 only if everything is correct. SENDSZ is libtirpc's
 * send buffer size, which bounds its record fragments (small values make
 * every large call a multi-fragment record).
 *
 * Build: rpcgen rdmatest.x && cc -O2 -I/usr/include/tirpc rdmatest_client.c \
 *        rdmatest_clnt.c rdmatest_xdr.c -ltirpc -o rdmatest_client
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rdmatest.h"

static const char *server_name;
static int failures;

#define FAIL(...)                                                            \
	do {                                                                 \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                       \
		fputc('\n', stderr);                                         \
		failures++;                                                  \
	} while (0)

/* CRC-32C (Castagnoli), reflected polynomial 0x82F63B78. */
static uint32_t crc_table[256];

static void crc32c_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[i] = c;
	}
}

static uint32_t crc32c(const unsigned char *p, size_t n)
{
	uint32_t c = 0xFFFFFFFFu;
	while (n--)
		c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
	return c ^ 0xFFFFFFFFu;
}

static unsigned char *pattern(uint32_t seed, size_t len)
{
	unsigned char *p = malloc(len ? len : 1);
	if (!p) {
		perror("malloc");
		exit(2);
	}
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(seed + i);
	return p;
}

/* Returns the first offset where data is not the pattern, or -1. */
static long check_pattern(uint32_t seed, const char *data, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)data[i] != (unsigned char)(seed + i))
			return (long)i;
	return -1;
}

static void test_echo(CLIENT *clnt, size_t len)
{
	unsigned char *data = pattern(3, len);
	rdmatest_data arg = { (u_int)len, (char *)data };
	rdmatest_data *res = rdmatest_echo_1(&arg, clnt);
	if (!res) {
		FAIL("ECHO %zu: %s", len, clnt_sperror(clnt, server_name));
	} else if (res->rdmatest_data_len != len) {
		FAIL("ECHO %zu: got %u bytes", len, res->rdmatest_data_len);
	} else if (len && memcmp(res->rdmatest_data_val, data, len) != 0) {
		FAIL("ECHO %zu: data differs", len);
	} else {
		printf("ECHO %zu ok\n", len);
	}
	if (res)
		xdr_free((xdrproc_t)xdr_rdmatest_data, (char *)res);
	free(data);
}

static void test_put(CLIENT *clnt, size_t len)
{
	unsigned char *data = pattern(11, len);
	uint32_t want = crc32c(data, len);
	rdmatest_data arg = { (u_int)len, (char *)data };
	put_res *res = rdmatest_put_1(&arg, clnt);
	if (!res)
		FAIL("PUT %zu: %s", len, clnt_sperror(clnt, server_name));
	else if (res->length != len || res->crc32c != want)
		FAIL("PUT %zu: server says length %u crc %#x, expected crc %#x",
		     len, res->length, res->crc32c, want);
	else
		printf("PUT %zu ok (crc32c %#010x)\n", len, want);
	free(data);
}

static void test_get(CLIENT *clnt, u_int len, u_int seed, u_int want_status)
{
	get_args arg = { len, seed };
	get_res *res = rdmatest_get_1(&arg, clnt);
	if (!res) {
		FAIL("GET %u: %s", len, clnt_sperror(clnt, server_name));
		return;
	}
	if (res->status != want_status) {
		FAIL("GET %u: status %u, expected %u", len, res->status, want_status);
	} else if (want_status == 0) {
		u_int got = res->get_res_u.data.data_len;
		long bad = check_pattern(seed, res->get_res_u.data.data_val, got);
		if (got != len)
			FAIL("GET %u: got %u bytes", len, got);
		else if (bad >= 0)
			FAIL("GET %u: pattern wrong at offset %ld", len, bad);
		else
			printf("GET %u ok\n", len);
	} else {
		printf("GET %u ok (status %u)\n", len, res->status);
	}
	xdr_free((xdrproc_t)xdr_get_res, (char *)res);
}

static void test_get2(CLIENT *clnt, u_int a, u_int b, u_int seed)
{
	get2_args arg = { a, b, seed };
	get2_res *res = rdmatest_get2_1(&arg, clnt);
	if (!res) {
		FAIL("GET2 %u %u: %s", a, b, clnt_sperror(clnt, server_name));
		return;
	}
	if (res->a.a_len != a || res->b.b_len != b)
		FAIL("GET2 %u %u: got lengths %u %u", a, b, res->a.a_len, res->b.b_len);
	else if (check_pattern(seed, res->a.a_val, a) >= 0)
		FAIL("GET2: a is not the pattern");
	else if (res->marker != 0xFEEDFACEu)
		FAIL("GET2: marker %#x", res->marker);
	else if (check_pattern(seed + 1, res->b.b_val, b) >= 0)
		FAIL("GET2: b is not the pattern");
	else
		printf("GET2 %u %u ok\n", a, b);
	xdr_free((xdrproc_t)xdr_get2_res, (char *)res);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s HOST PORT MAX_DATA SENDSZ\n", argv[0]);
		return 2;
	}
	server_name = argv[1];
	int port = atoi(argv[2]);
	u_int max_data = (u_int)strtoul(argv[3], NULL, 10);
	u_int sendsz = (u_int)strtoul(argv[4], NULL, 10);
	crc32c_init();

	struct sockaddr_in addr;
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
		fprintf(stderr, "bad IPv4 address %s\n", argv[1]);
		return 2;
	}
	int sock = RPC_ANYSOCK;
	CLIENT *clnt = clnttcp_create(&addr, RDMATEST, RDMATEST_V1, &sock, sendsz, 0);
	if (!clnt) {
		clnt_pcreateerror(argv[1]);
		return 1;
	}
	struct timeval tv = { 30, 0 };
	clnt_control(clnt, CLSET_TIMEOUT, (char *)&tv);

	if (!rdmatest_null_1(NULL, clnt))
		FAIL("NULL: %s", clnt_sperror(clnt, server_name));
	else
		printf("NULL ok\n");

	size_t sizes[] = { 0, 1, 5, 4096, 100003, 1 << 20, max_data };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		test_echo(clnt, sizes[i]);
		test_put(clnt, sizes[i]);
		test_get(clnt, (u_int)sizes[i], 5 + (u_int)i, 0);
	}
	test_get(clnt, max_data + 1, 0, 1);
	test_get2(clnt, 1000, 3001, 9);
	test_get2(clnt, 0, 70000, 250);

	u_int ms = 10;
	if (!rdmatest_sleep_1(&ms, clnt))
		FAIL("SLEEP: %s", clnt_sperror(clnt, server_name));
	else
		printf("SLEEP ok\n");

	clnt_destroy(clnt);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
