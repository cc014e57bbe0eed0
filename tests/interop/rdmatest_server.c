/*
 * An independent RDMATEST server: rpcgen server stubs (rpcgen -m, from
 * rdmatest.x) over libtirpc's TCP transport (svc_vc_create: RFC 5531 record
 * marking), for testing our client against a foreign implementation.
 *
 *   rdmatest_server MAX_DATA SENDSZ
 *
 * Listens on 127.0.0.1 on a free port (no rpcbind registration), prints
 * "listening on 127.0.0.1:PORT" and serves until killed. GET answers status
 * 1 above MAX_DATA; SENDSZ is libtirpc's send buffer size, which bounds the
 * fragments of its replies (0 = libtirpc's default).
 *
 * Build: rpcgen -h -o rdmatest.h rdmatest.x && rpcgen -c -o rdmatest_xdr.c rdmatest.x &&
 *        rpcgen -m -o rdmatest_svc.c rdmatest.x &&
 *        cc -O2 -I/usr/include/tirpc rdmatest_server.c rdmatest_svc.c rdmatest_xdr.c -ltirpc
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdmatest.h"

/* Defined by rpcgen -m in rdmatest_svc.c. */
void rdmatest_1(struct svc_req *rqstp, SVCXPRT *transp);

static u_int max_data;

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

/* A buffer of `len` pattern bytes for `seed`, reused between calls (the
 * reply is encoded before the next call is handled). */
static char *pattern(int which, u_int seed, u_int len)
{
	static char *bufs[2];
	static u_int caps[2];
	if (caps[which] < len || !bufs[which]) {
		free(bufs[which]);
		bufs[which] = malloc(len ? len : 1);
		if (!bufs[which]) {
			perror("malloc");
			exit(2);
		}
		caps[which] = len;
	}
	for (u_int i = 0; i < len; i++)
		bufs[which][i] = (char)(unsigned char)(seed + i);
	return bufs[which];
}

void *rdmatest_null_1_svc(void *argp, struct svc_req *rqstp)
{
	static char res;
	(void)argp;
	(void)rqstp;
	return &res;
}

rdmatest_data *rdmatest_echo_1_svc(rdmatest_data *argp, struct svc_req *rqstp)
{
	static rdmatest_data res;
	(void)rqstp;
	res = *argp; /* the arguments are freed after the reply is sent */
	return &res;
}

put_res *rdmatest_put_1_svc(rdmatest_data *argp, struct svc_req *rqstp)
{
	static put_res res;
	(void)rqstp;
	res.length = argp->rdmatest_data_len;
	res.crc32c = crc32c((const unsigned char *)argp->rdmatest_data_val,
			    argp->rdmatest_data_len);
	return &res;
}

get_res *rdmatest_get_1_svc(get_args *argp, struct svc_req *rqstp)
{
	static get_res res;
	(void)rqstp;
	memset(&res, 0, sizeof(res));
	if (argp->length > max_data) {
		res.status = 1;
		return &res;
	}
	res.status = 0;
	res.get_res_u.data.data_len = argp->length;
	res.get_res_u.data.data_val = pattern(0, argp->seed, argp->length);
	return &res;
}

get2_res *rdmatest_get2_1_svc(get2_args *argp, struct svc_req *rqstp)
{
	static get2_res res;
	if (argp->len_a > max_data || argp->len_b > max_data) {
		svcerr_decode(rqstp->rq_xprt); /* GARBAGE_ARGS, as our server does */
		return NULL;
	}
	res.a.a_len = argp->len_a;
	res.a.a_val = pattern(0, argp->seed, argp->len_a);
	res.marker = 0xFEEDFACEu;
	res.b.b_len = argp->len_b;
	res.b.b_val = pattern(1, argp->seed + 1, argp->len_b);
	return &res;
}

void *rdmatest_sleep_1_svc(u_int *argp, struct svc_req *rqstp)
{
	static char res;
	(void)rqstp;
	usleep(*argp * 1000u);
	return &res;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s MAX_DATA SENDSZ\n", argv[0]);
		return 2;
	}
	max_data = (u_int)strtoul(argv[1], NULL, 10);
	u_int sendsz = (u_int)strtoul(argv[2], NULL, 10);
	crc32c_init();

	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr;
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t alen = sizeof(addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    listen(fd, 64) != 0 ||
	    getsockname(fd, (struct sockaddr *)&addr, &alen) != 0) {
		perror("socket");
		return 1;
	}
	SVCXPRT *xprt = svc_vc_create(fd, sendsz, 0);
	if (!xprt) {
		fprintf(stderr, "svc_vc_create failed\n");
		return 1;
	}
	/* Protocol 0: do not register with rpcbind. */
	if (!svc_register(xprt, RDMATEST, RDMATEST_V1, rdmatest_1, 0)) {
		fprintf(stderr, "svc_register failed\n");
		return 1;
	}
	printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
	fflush(stdout);
	svc_run();
	fprintf(stderr, "svc_run returned\n");
	return 1;
}
