// 1x1 convolution probe (issue 22): oneDNN 2.6's NHWC brgconv_1x1 (bias, optional residual as the sum
// post-op, ReLU) against cpu::ConvRows (its pixel-major 1x1 form where conv_rows.h pixel_major takes
// the shape), interleaved one call each per round, hot caches, p50 of ROUNDS (15) rounds; the copy of
// the residual into the output before each call is timed apart and subtracted. Thread CPU time
// (WALL=1: wall time, for several threads). Prints both times, the ratio (ConvRows / oneDNN) and the
// largest difference of the two outputs.
// Build: g++ -O2 -std=c++17 -mavx512f -fopenmp -Isrc bench/conv1x1_probe.cpp src/backends/cpu/conv_rows.cpp -ldnnl -o /tmp/conv1x1_probe
// Run:   OMP_NUM_THREADS=1 /tmp/conv1x1_probe N H W CIN COUT STRIDE SUM
//        e.g. 2 56 56 64 256 1 1 (ResNet-50 layer1 conv3 on a batch split's part), 2 28 28 512 1024 2 0
// Found (1 thread, load 3-5 on 2 cores): 2x56x56 64->256 0.85-0.95x oneDNN's time, with the residual
// 0.76-1.23x from run to run; 1x28x28 / 2x28x28 512->1024 s2 0.68-0.84x; in the model the gains held
// more steadily than here (dnnl_conv.cpp use_rows_1x1).
#include <oneapi/dnnl/dnnl.hpp>
#include "backends/cpu/conv_rows.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>
using namespace dnnl; using tag = memory::format_tag; using dt = memory::data_type;
static double now(){timespec ts;clock_gettime(getenv("WALL")?CLOCK_MONOTONIC:CLOCK_THREAD_CPUTIME_ID,&ts);return ts.tv_sec+ts.tv_nsec*1e-9;}
int main(int argc,char**argv){
  const int N=atoi(argv[1]),H=atoi(argv[2]),W=atoi(argv[3]),C=atoi(argv[4]),O=atoi(argv[5]),S=atoi(argv[6]),sum=atoi(argv[7]);
  const int OH=(H-1)/S+1,OW=(W-1)/S+1;
  engine eng(engine::kind::cpu,0); stream st(eng);
  std::vector<float> x((size_t)N*H*W*C),w((size_t)O*C),b(O),z((size_t)N*OH*OW*O),y((size_t)N*OH*OW*O),y2(y.size());
  for(size_t i=0;i<x.size();++i)x[i]=((i*13)%97)*0.01f-0.4f;
  for(size_t i=0;i<w.size();++i)w[i]=((i*7)%31)*0.003f-0.04f;
  for(int i=0;i<O;++i)b[i]=(i%5)*0.1f-0.2f;
  for(size_t i=0;i<z.size();++i)z[i]=((i*11)%23)*0.05f-0.5f;
  post_ops ops; if(sum)ops.append_sum(1.f); ops.append_eltwise(1.f,algorithm::eltwise_relu,0.f,0.f);
  primitive_attr attr; attr.set_post_ops(ops); attr.set_scratchpad_mode(scratchpad_mode::user);
  memory::desc src({N,C,H,W},dt::f32,tag::nhwc),dst({N,O,OH,OW},dt::f32,tag::nhwc),wany({O,C,1,1},dt::f32,tag::any),bmd({O},dt::f32,tag::x);
  auto cd=convolution_forward::desc(prop_kind::forward_inference,algorithm::convolution_direct,src,wany,bmd,dst,{S,S},{0,0},{0,0});
  convolution_forward::primitive_desc cpd(cd,attr,eng);
  memory wu({{O,C,1,1},dt::f32,tag::oihw},eng,w.data()); memory wc(cpd.weights_desc(),eng); reorder(wu,wc).execute(st,wu,wc);
  memory xs(src,eng,x.data()),ys(dst,eng,y.data()),bs(bmd,eng,b.data()),sc(cpd.scratchpad_desc(),eng);
  convolution_forward conv(cpd);
  ferry::cpu::ConvRows rc(w.data(),b.data(),O,C,1,1,S,S,0,0);
  auto f1=[&]{ if(sum) std::copy(z.begin(),z.end(),y.begin()); conv.execute(st,{{DNNL_ARG_SRC,xs},{DNNL_ARG_WEIGHTS,wc},{DNNL_ARG_BIAS,bs},{DNNL_ARG_DST,ys},{DNNL_ARG_SCRATCHPAD,sc}}); st.wait();};
  auto f2=[&]{ if(sum) std::copy(z.begin(),z.end(),y2.begin()); rc.run(x.data(),N,H,W,sum?y2.data():nullptr,y2.data(),true);};
  // the copy of z (to have the residual in dst) timed out: same for both
  std::vector<double> t1,t2,tc; int R=getenv("ROUNDS")?atoi(getenv("ROUNDS")):15;
  f1();f2();
  for(int r=0;r<R;++r){ double t0=now(); if(sum) std::copy(z.begin(),z.end(),y.begin()); tc.push_back(now()-t0);
    t0=now(); f1(); t1.push_back(now()-t0); t0=now(); f2(); t2.push_back(now()-t0);}
  std::sort(t1.begin(),t1.end());std::sort(t2.begin(),t2.end());std::sort(tc.begin(),tc.end());
  double gf=2.0*N*OH*OW*O*C*1e-9, c=tc[R/2];
  double md=0,mx=0; for(size_t i=0;i<y.size();++i){md=std::max(md,(double)std::abs(y[i]-y2[i]));mx=std::max(mx,(double)std::abs(y[i]));}
  std::printf("%dx%dx%d %d->%d s%d sum%d pm%d: %s %.3f ms (%.0f GF/s) | rows %.3f ms (%.0f GF/s) | ratio %.2f | maxdiff %.2g of %.2g\n",N,H,W,C,O,S,sum,(int)rc.pixel_major(N*OH*OW),
    cpd.impl_info_str(),(t1[R/2]-c)*1e3,gf/(t1[R/2]-c),(t2[R/2]-c)*1e3,gf/(t2[R/2]-c),(t2[R/2]-c)/(t1[R/2]-c),md,mx);
}
