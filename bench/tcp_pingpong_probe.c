// Loopback TCP round trip of an 8-byte message, blocking against spinning (issue 35): the floor under
// `ferry serve`'s overhead at concurrency 1 on this VM. Blocking, each side sleeps in recv and is woken
// by the other's send; on an idle VM each wake-up is an idle vCPU's (slow here), so the p50 depends on
// the load. Spinning (MSG_DONTWAIT, both ends busy) shows the round trip without the wake-ups.
//   gcc -O2 -o /tmp/tcp_pingpong_probe bench/tcp_pingpong_probe.c && /tmp/tcp_pingpong_probe && /tmp/tcp_pingpong_probe 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/socket.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){int spin=argc>1?atoi(argv[1]):0;
 int ls=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in a={0};a.sin_family=AF_INET;a.sin_addr.s_addr=htonl(0x7f000001);
 bind(ls,(void*)&a,sizeof a);listen(ls,1);socklen_t l=sizeof a;getsockname(ls,(void*)&a,&l);
 if(fork()==0){int s=accept(ls,0,0);int one=1;setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);char b[64];
  for(;;){int n=recv(s,b,64,spin?MSG_DONTWAIT:0);if(n<0)continue;if(n==0)break;send(s,b,n,0);}_exit(0);}
 int c=socket(AF_INET,SOCK_STREAM,0);connect(c,(void*)&a,sizeof a);int one=1;setsockopt(c,IPPROTO_TCP,TCP_NODELAY,&one,4);
 enum{N=4000};static double d[N];char b[64]="x";
 for(int i=0;i<N;i++){double t=now();send(c,b,8,0);int got=0;while(got<8){int n=recv(c,b,64,spin?MSG_DONTWAIT:0);if(n>0)got+=n;}d[i]=now()-t;}
 qsort(d,N,sizeof(double),cmp);printf("%s p50 %.1f us p90 %.1f us\n",spin?"spin":"block",d[N/2],d[N*9/10]);close(c);return 0;}
