// Micro-benchmark for oneDNN 2.6's depthwise post-op (post_ops::append_dw_k3s1p1 / k3s2p1): MobileNetV2's
// inverted-residual pairs (1x1 expand + Clip(0,6) -> 3x3 depthwise + Clip(0,6), batch NB, 224x224 input)
// as two NHWC primitives against one fused primitive (argv[1] 'nhwc': NHWC src/dst; 'b': format any).
// Prints both times (best of 5 x 20 calls) and the implementation oneDNN picks for the fused one.
// Build: g++ -O2 -std=c++17 bench/dw_fusion_probe.cpp -ldnnl -o /tmp/dw_probe && OMP_NUM_THREADS=1 /tmp/dw_probe nhwc
// Findings (docs/performance.md, issue 22): only large images get a real fused kernel (jit_1x1).
#include <oneapi/dnnl/dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cmath>
#include <random>
#include <cstdlib>
using namespace dnnl; using tag = memory::format_tag; using dt = memory::data_type;
engine eng(engine::kind::cpu, 0); stream st(eng);
double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
template<class F> double timeit(F f){ for(int i=0;i<5;i++) f(); double best=1e9; for(int r=0;r<5;r++){ double t=now(); for(int i=0;i<20;i++) f(); best=std::min(best,(now()-t)/20);} return best*1e3;}
void fill(memory& m){ float* p=(float*)m.get_data_handle(); size_t n=m.get_desc().get_size()/4; std::mt19937 g(1); std::uniform_real_distribution<float> u(-1,1); for(size_t i=0;i<n;i++) p[i]=u(g)*0.3f;}
int main(int argc,char**argv){
  struct S{int cin,cexp,h,s;}; std::vector<S> ss={{16,96,112,2},{24,144,56,1},{24,144,56,2},{32,192,28,1},{32,192,28,2},{64,384,14,1},{96,576,14,1},{96,576,14,2},{160,960,7,1}};
  tag io = argc>1 && argv[1][0]=='b' ? tag::any : tag::nhwc;
  for(auto s: ss){
    int N=getenv("NB")?atoi(getenv("NB")):1, H=s.h, Ho=(H+2-3)/s.s+1;
    memory::desc x({N,s.cin,H,H},dt::f32,tag::nhwc), y1({N,s.cexp,H,H},dt::f32,tag::nhwc), y2({N,s.cexp,Ho,Ho},dt::f32,tag::nhwc);
    memory::desc w1({s.cexp,s.cin,1,1},dt::f32,tag::any), b1({s.cexp},dt::f32,tag::x), w2({s.cexp,1,1,3,3},dt::f32,tag::any);
    post_ops p1; p1.append_eltwise(1,algorithm::eltwise_clip,0,6); primitive_attr a1; a1.set_post_ops(p1);
    auto pd1=convolution_forward::primitive_desc({prop_kind::forward_inference,algorithm::convolution_direct,x,w1,b1,y1,{1,1},{0,0},{0,0}},a1,eng);
    auto pd2=convolution_forward::primitive_desc({prop_kind::forward_inference,algorithm::convolution_direct,y1,w2,b1,y2,{s.s,s.s},{1,1},{1,1}},a1,eng);
    memory mx(x,eng), my1(y1,eng), my2(y2,eng), mw1(pd1.weights_desc(),eng), mw2(pd2.weights_desc(),eng), mb(b1,eng), mb2(b1,eng);
    fill(mx); fill(mw1); fill(mb); fill(mb2);
    memory sp1(pd1.scratchpad_desc(),eng), sp2(pd2.scratchpad_desc(),eng);
    convolution_forward c1(pd1), c2(pd2);
    double tu=timeit([&]{ c1.execute(st,{{DNNL_ARG_SRC,mx},{DNNL_ARG_WEIGHTS,mw1},{DNNL_ARG_BIAS,mb},{DNNL_ARG_DST,my1},{DNNL_ARG_SCRATCHPAD,sp1}}); c2.execute(st,{{DNNL_ARG_SRC,my1},{DNNL_ARG_WEIGHTS,mw2},{DNNL_ARG_BIAS,mb2},{DNNL_ARG_DST,my2},{DNNL_ARG_SCRATCHPAD,sp2}}); st.wait();});
    // fused
    post_ops pf; pf.append_eltwise(1,algorithm::eltwise_clip,0,6);
    if(s.s==1) pf.append_dw_k3s1p1(dt::f32,dt::f32,dt::f32,0,{}); else pf.append_dw_k3s2p1(dt::f32,dt::f32,dt::f32,0,{});
    pf.append_eltwise(1,algorithm::eltwise_clip,0,6);
    primitive_attr af; af.set_post_ops(pf); af.set_scratchpad_mode(scratchpad_mode::user);
    memory::desc xf({N,s.cin,H,H},dt::f32,io), yf({N,s.cexp,H,H},dt::f32,io);
    try{
      auto pdf=convolution_forward::primitive_desc({prop_kind::forward_inference,algorithm::convolution_direct,xf,w1,b1,yf,{1,1},{0,0},{0,0}},af,eng);
      auto dwwd=pdf.query_md(query::exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW|DNNL_ARG_WEIGHTS);
      auto dwbd=pdf.query_md(query::exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW|DNNL_ARG_BIAS);
      memory mxf(pdf.src_desc(),eng), myf(pdf.dst_desc(),eng), mwf(pdf.weights_desc(),eng), mdw(dwwd,eng), mdb(dwbd,eng), spf(pdf.scratchpad_desc(),eng);
      fill(mxf); fill(mwf); fill(mdw); fill(mdb);
      convolution_forward cf(pdf);
      double tf=timeit([&]{ cf.execute(st,{{DNNL_ARG_SRC,mxf},{DNNL_ARG_WEIGHTS,mwf},{DNNL_ARG_BIAS,mb},{DNNL_ARG_DST,myf},{DNNL_ARG_ATTR_POST_OP_DW|DNNL_ARG_WEIGHTS,mdw},{DNNL_ARG_ATTR_POST_OP_DW|DNNL_ARG_BIAS,mdb},{DNNL_ARG_SCRATCHPAD,spf}}); st.wait();});
      auto dd=pdf.dst_desc().dims();
      printf("cin %d cexp %d H %d s %d: unfused %.3f ms fused %.3f ms  (%s) dst %ldx%ldx%ldx%ld impl %s\n",s.cin,s.cexp,H,s.s,tu,tf,io==tag::any?"any":"nhwc",(long)dd[0],(long)dd[1],(long)dd[2],(long)dd[3],pdf.impl_info_str());
    }catch(dnnl::error&e){ printf("cin %d cexp %d H %d s %d: unfused %.3f ms fused FAIL %s\n",s.cin,s.cexp,H,s.s,tu,e.what());}
  }
}
